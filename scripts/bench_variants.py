"""Forward+backward time of each variant's module at one length (a benchmark, not a test).

    python scripts/bench_variants.py --seq-len 4096 --d-model 256 --heads 4 --repeats 5

Prints one line per variant: median and IQR of forward+backward wall time (ms), and
the predicted tensor peak of the same step (fake tensors; equal to the
exact CPU tracker's figure, see tests/profiler/test_predict.py). Uses torch.utils.benchmark for the timing.
"""

from __future__ import annotations

import argparse

import torch
from torch.utils import benchmark

from attnprof.profiler.predict.fake_run import predict
from attnprof.profiler.records import Point
from attnprof.profiler.units import fmt_bytes
from attnprof.profiler.measure.workload import Workload
from attnprof.scenarios.variants.registry import variant_names
from attnprof.profiler.records import Shape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scope", default="model", choices=["model", "attention"])
    args = parser.parse_args()
    shape = Shape(batch=args.batch, seq_len=args.seq_len, d_model=args.d_model, heads=args.heads, layers=1)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {shape}")
    print(f"{'variant':<16}{'fwd+bwd median ms':>18}{'IQR ms':>10}{'predicted peak':>16}")
    for name in variant_names():
        point = Point(name, "plain" if args.scope == "model" else "none", args.scope, shape)
        torch.manual_seed(0)
        work = Workload(point)
        work.step()  # warm-up
        work.zero_grad()

        def step():
            work.step()
            work.zero_grad()

        timer = benchmark.Timer(stmt="step()", globals={"step": step}, label=name)
        samples = [timer.timeit(1).median * 1e3 for _ in range(args.repeats)]  # one step each: ms
        samples.sort()
        median = samples[len(samples) // 2]
        iqr = samples[(3 * len(samples)) // 4] - samples[len(samples) // 4]
        peak = predict(point, count_flops=False).peak_bytes
        print(f"{name:<16}{median:>18.1f}{iqr:>10.1f}{fmt_bytes(peak):>16}")
        del work


if __name__ == "__main__":
    main()
