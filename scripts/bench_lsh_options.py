"""How LSH's paper-exact options change the output, time and peak at one shape (scope attention).

    python scripts/bench_lsh_options.py --seq-len 4096 --d-model 256 --heads 4 --repeats 11

Inputs are clustered (64 unit centres, noise 0.1/sqrt(d_head), scaled by 100) so attention is
peaked, as LSH assumes. Every label with the same (n_hashes, n_buckets) reuses the same
rotations, so "vs default" is the options' own effect: ||out - out_default|| / ||out_default||
against lsh[n_hashes=r] of the same r. Also printed: the same against dense shared-QK
attention, the difference between two rotation draws of the default (the hash noise floor),
the median and min forward+backward time (labels timed round-robin, after one warm-up), and
the exact tracked forward+backward peak (attnprof predict --scope attention gives the same).
The figures are in docs/variants.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from attnprof.profiler.measure.tracker import MemoryTracker
from attnprof.scenarios.variants.registry import parse_variant

PAPER = "bucket_mask=true,dedup=true,lookback=within_round"
LABELS = ["lsh", "lsh[bucket_mask=true]", "lsh[dedup=true]", "lsh[lookback=within_round]", f"lsh[{PAPER}]",
          "lsh[buckets_per_chunk=2]", f"lsh[{PAPER},buckets_per_chunk=2]", "lsh[n_hashes=4]", f"lsh[n_hashes=4,{PAPER}]"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    n, d, h = args.seq_len, args.d_model, args.heads
    dh = d // h
    centres = torch.nn.functional.normalize(torch.randn(h, 64, dh), dim=-1)
    qk = ((centres[:, torch.randint(0, 64, (n,))] + 0.1 / math.sqrt(dh) * torch.randn(h, n, dh)) * 100).unsqueeze(0)
    v, g = torch.randn(1, h, n, dh), torch.randn(1, h, n, dh)

    def rel(x, y):
        return ((x - y).norm() / y.norm()).item()

    logits = qk @ (qk / qk.norm(dim=-1, keepdim=True)).transpose(-1, -2) / math.sqrt(dh)
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    dense = logits.masked_fill(j > i, torch.finfo(logits.dtype).min).masked_fill(i == j, -1e5).softmax(-1) @ v
    del logits

    modules, outs, draws = {}, {}, {}
    for label in LABELS:
        m = parse_variant(label).build(d, h)
        key = (m.n_hashes, m.n_buckets(m.options, n))
        m.rotations = draws.setdefault(key, torch.randn(dh, key[0], key[1] // 2))
        modules[label] = m
        with torch.no_grad(), m.replay_hashes():
            outs[label] = m.core(qk, qk, v)
    other = parse_variant("lsh").build(d, h)
    with torch.no_grad():
        floor = rel(other.core(qk, qk, v), outs["lsh"])  # fresh rotations
    print(f"hash noise floor (default, two rotation draws): {floor:.3f}; default vs dense: {rel(outs['lsh'], dense):.3f}")

    times = {label: [] for label in LABELS}
    for rep in range(args.repeats + 1):  # round-robin: drift of a shared machine hits every label alike
        for label, m in modules.items():
            a, b = qk.clone().requires_grad_(True), v.clone().requires_grad_(True)
            with m.replay_hashes():
                start = time.perf_counter()
                m.core(a, a, b).backward(g)
                if rep:
                    times[label].append(time.perf_counter() - start)
    for label, m in modules.items():
        a, b = qk.clone().requires_grad_(True), v.clone().requires_grad_(True)
        with m.replay_hashes(), MemoryTracker() as tracker:
            m.core(a, a, b).backward(g)
        base = "lsh[n_hashes=4]" if "n_hashes=4" in label else "lsh"
        print(f"{label:76s} vs_default={rel(outs[label], outs[base]):.3f} vs_dense={rel(outs[label], dense):.3f} "
              f"time_ms median={1000 * statistics.median(times[label]):.0f} min={1000 * min(times[label]):.0f} "
              f"peak_MiB={tracker.report().peak_bytes / 2**20:.1f}", flush=True)


if __name__ == "__main__":
    main()
