"""Printing the time model's figures (profiler.timemodel.time_format): the step time is
fwd + bwd, ``rank`` orders what fits fastest first and says why the rest is left out,
and every heading names the device and says the times are a model."""

from attnprof.profiler.timemodel.time_format import (CPU_LABEL, format_ranking, format_time_table, rank,
                                                     time_of)

MiB = 2 ** 20


def record(variant, fwd, bwd, *, mode="plain", n=1024, batch=2, peak=10 * MiB, **extra):
    return {"variant": variant, "mode": mode, "seq_len": n, "batch": batch, "status": "ok",
            "predicted_time_fwd_ms": fwd, "predicted_time_bwd_ms": bwd, "predicted_peak_bytes": peak, **extra}


def test_the_step_time_is_forward_plus_backward_on_the_model_asked_for():
    r = record("full", 1.0, 2.0, gpu_time_fwd_ms=0.1, gpu_time_bwd_ms=0.3)
    assert time_of(r, gpu=False) == (1.0, 2.0, 3.0)
    assert time_of(r, gpu=True) == (0.1, 0.3, 0.4)
    assert time_of(record("full", None, None), gpu=False)[2] is None


def test_the_time_table_names_the_cpu_model_and_counts_tokens_per_second():
    text = format_time_table([record("sdpa", 1.0, 3.0, batch=2, n=1000)])
    lines = text.splitlines()
    assert lines[0] == CPU_LABEL and "MODEL" in lines[0]
    assert "sdpa" in text and "500,000" in text  # 2 x 1000 tokens in 4 ms
    assert format_time_table([record("sdpa", None, None)]).splitlines()[-1].split()[-1] == "-"


def test_rank_orders_the_fitting_points_fastest_first_and_explains_the_others():
    fast, slow, tie = record("sdpa", 1.0, 1.0), record("full", 2.0, 4.0), record("lsh", 1.0, 1.0)
    big = record("full", 0.1, 0.1, mode="checkpoint", peak=100 * MiB)
    failed = {**record("full", 0.1, 0.1, mode="reversible"), "status": "oom", "reason": "out of memory"}
    untimed = record("sparse_fixed", None, 1.0)
    fitting, left = rank([slow, fast, big, failed, untimed, tie], gpu=False, memory_limit_bytes=50 * MiB)
    assert fitting == [tie, fast, slow]  # equal times: by variant name
    why = {(r["variant"], r["mode"]): reason for r, reason in left}
    assert why[("full", "reversible")] == "out of memory"
    assert why[("full", "checkpoint")].startswith("predicted peak 100") and "over this machine's" in why[("full", "checkpoint")]
    assert why[("sparse_fixed", "plain")].startswith("no predicted time")
    assert rank([big], gpu=False)[0] == [big]  # no limit: everything with a time fits


def test_on_a_gpu_the_memory_model_decides_what_fits():
    fits = record("sdpa", 0, 0, gpu="h100-sxm", gpu_fits=True, gpu_time_fwd_ms=1.0, gpu_time_bwd_ms=2.0)
    too_big = record("full", 0, 0, gpu="h100-sxm", gpu_fits=False, gpu_total_bytes=90 * 2 ** 30)
    fitting, left = rank([too_big, fits], gpu=True)
    assert fitting == [fits]
    assert left[0][1].startswith("does not fit h100-sxm (model: 90")


def test_the_ranking_has_one_section_per_gpu_and_lists_what_was_left_out():
    a = record("sdpa", 0, 0, gpu="a100-80gb", gpu_fits=True, gpu_time_fwd_ms=1.0, gpu_time_bwd_ms=1.0)
    h = record("full", 0, 0, gpu="h100-sxm", gpu_fits=False, gpu_total_bytes=MiB)
    text = format_ranking([a, h], gpus=["a100-80gb", "h100-sxm"])
    heads = [line for line in text.splitlines() if line.startswith("ranked by predicted step time")]
    assert len(heads) == 2 and "a100-80gb" in heads[0] and "h100-sxm" in heads[1]
    assert all("MODEL" in line for line in heads)
    assert "left out: full plain n=1024: does not fit h100-sxm" in text
    cpu = format_ranking([record("sdpa", 1.0, 1.0)], gpus=[])
    assert cpu.splitlines()[0].endswith(CPU_LABEL)


def test_a_gpu_ranking_says_how_sure_the_model_is_once_per_gpu_and_never_on_the_cpu():
    said = "not checked on a real GPU: l4 was never measured (measured: h200)"
    a = record("sdpa", 1.0, 1.0, gpu="l4", gpu_fits=True, gpu_time_fwd_ms=1.0, gpu_time_bwd_ms=1.0, gpu_checked=said)
    b = record("full", 1.0, 1.0, gpu="l4", gpu_fits=True, gpu_time_fwd_ms=2.0, gpu_time_bwd_ms=1.0, gpu_checked=said)
    text = format_ranking([a, b], gpus=["l4"])
    assert text.splitlines()[-1] == f"how sure (the GPU model against a real GPU): {said}"
    assert "how sure" not in format_ranking([record("sdpa", 1.0, 1.0, gpu_checked=said)], gpus=[])
