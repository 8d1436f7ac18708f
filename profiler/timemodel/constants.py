"""Efficiency constants of the GPU time model, per device family, each with its source.

A constant is the fraction of a datasheet peak (gpus.toml: dense TFLOP/s per dtype,
bandwidth_bytes_per_s) that a kind of kernel reaches in practice. The numbers and their
sources are collected in docs/time-model.md ("Proposed efficiency constants per
device family"); the published timings they can be checked against are in published.toml
beside this file. The CPU has no constants: ``attnprof calibrate`` measures it.

Families go by compute capability: Ampere (8.0, 8.6), Ada (8.9), Hopper (9.0) and later.
Nothing published was found for Ada or Blackwell: Ada takes Ampere's figures (the same
FlashAttention-2 sm8x kernels), anything newer than Hopper takes Hopper's. Both are
estimates, and the Rates' ``source`` says so.
"""

from __future__ import annotations

# cuBLAS GEMM, large fp16/bf16 matrices: "optimized GEMM can reach up to 80-90% of the
# theoretical maximum device throughput" (FlashAttention-2, Dao 2023, arXiv 2307.08691, §1);
# whole-model training reaches 72% MFU on A100 (same paper, Table 1), a floor. No per-dtype
# figure for H100 was found; 0.80 is carried over. Checked on the lent H200 (the workplace's
# device notes, KINDS.md, 2026-10-28 and 11-04): an 8192^3 bf16 torch.matmul ran at 769-798
# TFLOP/s on random data, 0.78-0.81 of the 989.4 dense peak.
GEMM_EFFICIENCY = 0.80

# Fused attention, fraction of the dtype's dense peak, (forward, backward), per SDPA backend.
# flash = FlashAttention-2 (what torch's SDPA flash backend runs on every GPU):
#   A100: fwd 0.72 / bwd 0.63 at 16k tokens, d128 (FA2 Figs. 5b, 6b), ~0.4 at seq 512 -> 0.65 / 0.60;
#   H100: fwd 0.37 / bwd 0.33 (FA2 bars in FlashAttention-3, Shah et al. 2024, arXiv 2407.08608
#   v1, Figs. 5c, 6b; FA3 §1: "FlashAttention-2 achieving only 35% utilization on the H100").
# efficient = memory-efficient attention (xFormers' CUTLASS kernels), taken like FlashAttention-1:
#   "fwd 30-50%, bwd 25-35%" of peak on A100 (FA2 paper, §1) -> 0.40 / 0.30; for float32 it runs
#   on CUDA cores and the fraction applies to the fp32 peak (an estimate).
# cudnn = cuDNN's fused attention (torch prefers it on Hopper for some shapes): its bars in
#   FA3 Figs. 5-6 sit near FA3's own (fwd ~0.6, bwd ~0.55 at d128) -> 0.55 / 0.50, an estimate
#   read from the figure, not a published fraction.
ATTENTION_EFFICIENCY = {
    "ampere": {"flash": (0.65, 0.60), "efficient": (0.40, 0.30), "cudnn": (0.55, 0.50)},
    "hopper": {"flash": (0.37, 0.33), "efficient": (0.40, 0.30), "cudnn": (0.55, 0.50)},
}

# Fused attention's fraction of peak falls with the head dim (each K/V tile loaded brings
# fewer FLOPs per byte; FlashAttention-3 §4.1). The constants above are read at head dim 128;
# at 64 and below they are multiplied by the published ratio of the same kernel's rates at
# d64 and d128 (16k tokens, not causal):
#   cudnn (standing in for FlashAttention-3, as above): FA3 v1 on H100, fwd 497 / 648 TFLOP/s
#   (Figs. 5a, 5c), bwd 474 / 561 (Figs. 6a, 6b) -> 0.77 / 0.84;
#   flash (FlashAttention-2): FA2 on A100, fwd+bwd 176 / 203 TFLOP/s (Figs. 4a, 4b) -> 0.87 both;
#   efficient: nothing published by head dim -> no factor.
# Between 64 and 128 the factor runs linearly in log2(head dim); at 128 and above it is 1
# (FA3's d256 bars are higher still: not credited).
ATTENTION_D64_FACTOR = {"cudnn": (497 / 648, 474 / 561), "flash": (176 / 203, 176 / 203)}

# HBM/GDDR streaming kernels (elementwise, reductions, copies): A100 80GB reached 1.80 of
# 2.04 TB/s (88%) with a read kernel (NVIDIA developer forum, "Trouble to reach peak
# bandwidth of A100"); H100 SXM 2.8 of 3.35 TB/s (84%, mikamirai.com, third-party). On the
# lent H200 a device-to-device copy through torch moved about 4.3 TB/s, bytes read and written
# (KINDS.md, 2026-10-28 and 11-04): 0.90 of 4.8.
BANDWIDTH_EFFICIENCY = 0.85
# Indexed reads/writes and sorts touch memory in scattered order: an estimate, half the
# streaming fraction (no published figure found).
GATHER_BANDWIDTH_FACTOR = 0.5

# The host's cost of launching one kernel from eager PyTorch: "Usually, the launch time on the
# CPU side is between 5-20 microseconds" (facebookresearch/HolisticTraceAnalysis, docs
# cuda_kernel_launch_stats.rst). Launches are asynchronous ("By default, GPU operations are
# asynchronous", PyTorch docs, notes/cuda.html "Asynchronous execution"), so the roofline takes
# it as a FLOOR per kernel, max(kernel, launch), never as a sum: a kernel shorter than its
# launch leaves the GPU waiting for the host. The high end of the range, because a floor that
# is too low hides the wait altogether: the H200 run of issue 39 (tests/data/h200-2026-12-04)
# implies 30-55 us per op on its host for its small points (sdpa at 4K: 27 ops in 1.06 ms
# forward), more than any published figure; that is the host's CPU and Python, not the GPU.
LAUNCH_OVERHEAD_S = 20e-6

# PyTorch's default float32_matmul_precision is "highest" (torch.backends.cuda.matmul.
# allow_tf32 = False since torch 1.12): float32 matmuls run on CUDA cores at the fp32 peak,
# not on TF32 tensor cores. attnprof never changes it.
GPU_PEAK_KEY = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


def family(compute_capability: tuple) -> tuple[str, str]:
    """(family whose constants apply, a note when they are borrowed from another family)."""
    major, minor = compute_capability
    if major == 8 and minor != 9:
        return "ampere", ""
    if major == 8:
        return "ampere", "Ada (sm89) takes Ampere's efficiency constants (none published for Ada)"
    if major == 9:
        return "hopper", ""
    if major > 9:
        return "hopper", f"sm{major}{minor} takes Hopper's efficiency constants (none published for it)"
    return "ampere", f"sm{major}{minor} takes Ampere's efficiency constants (none published for it)"
