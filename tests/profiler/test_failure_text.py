"""An exception in one line: its type, the first line of its message and the innermost attnprof
frame (profiler/failure_text.py, issue 38), as a failed point and a failed prediction say it."""

from __future__ import annotations

from attnprof.profiler.failure_text import MESSAGE_CHARS, failure_reason, first_line, innermost_frame

CUDA_TEXT = ("CUDA error: initialization error\nCUDA kernel errors might be asynchronously reported at some "
             "other API call, so the stacktrace below might be incorrect.\nFor debugging consider passing "
             "CUDA_LAUNCH_BLOCKING=1")


def raised_in_torch() -> BaseException:
    import torch

    try:
        torch.ones(2, 3) @ torch.ones(2, 3)
    except RuntimeError as exc:
        return exc
    raise AssertionError("torch took a bad matmul")


def test_the_first_line_of_a_cuda_error_is_kept_and_its_advice_dropped():
    assert first_line(RuntimeError(CUDA_TEXT)) == "CUDA error: initialization error"
    assert first_line(ValueError("\n\n  spaced   out \n second")) == "spaced out"
    assert first_line(KeyError()) == ""
    long = first_line(RuntimeError("x" * 1000))
    assert len(long) == MESSAGE_CHARS and long.endswith("...")


def test_the_innermost_frame_is_attnprofs_not_torchs():
    exc = raised_in_torch()
    where = innermost_frame(exc)
    assert where is not None and where.startswith("tests/profiler/test_failure_text.py:")
    assert failure_reason(exc).startswith("RuntimeError: ") and failure_reason(exc).endswith(f"(at {where})")


def test_a_reason_without_a_message_or_a_frame_is_still_named():
    assert failure_reason(KeyError()) == "KeyError"  # never raised: no traceback, no frame
    assert failure_reason(RuntimeError(CUDA_TEXT)) == "RuntimeError: CUDA error: initialization error"
