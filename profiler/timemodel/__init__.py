"""The step-time MODEL: predicted forward and backward time of a point on this machine's CPU
(calibrated, ``attnprof calibrate``) or on a named GPU (datasheet peaks times published
efficiencies), from the per-op FLOPs and bytes of its fake-tensor prediction. See roofline.py."""
