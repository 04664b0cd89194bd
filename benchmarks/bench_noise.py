"""Throughput of the noise samplers, with rng.normal of the same size as the same-run baseline.

For each bit generator (PCG64 and randomgen's AESCounter, the library default for rng=None) prints
samples/s of sample_discrete_gaussian at sigma = 1, 10, 1000 and of sample_skellam (variance 1, 100,
1e6), each with the ratio of its time to rng.normal(size=n) timed in the same run on the same kind of
generator (target for the discrete Gaussian: <= 6x), then the exact sampler's samples/s.
Timings are the best of --repeat runs (the machine may be shared).

    python benchmarks/bench_noise.py [--n 1000000] [--repeat 5] [--exact-n 20000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from randomgen import AESCounter

from secagg_dp.noise import sample_discrete_gaussian, sample_discrete_gaussian_exact, sample_skellam


def best_time(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="samples per call (default 1e6)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions, best kept (default 5)")
    parser.add_argument("--exact-n", type=int, default=20_000, help="samples for the exact sampler")
    args = parser.parse_args()
    n = args.n

    generators = {
        "PCG64": lambda: np.random.Generator(np.random.PCG64(12345)),
        "AESCounter": lambda: np.random.Generator(AESCounter(seed=12345)),
    }
    print(f"n = {n:,} samples per call, best of {args.repeat}\n")
    print(f"{'generator':<11} {'sampler':<24} {'samples/s':>14} {'time ms':>9} {'x rng.normal':>13}")
    for gname, make in generators.items():
        rng = make()
        t_normal = best_time(lambda rng=rng: rng.normal(size=n), args.repeat)
        base = "rng.normal (baseline)"
        print(f"{gname:<11} {base:<24} {n / t_normal:>14,.0f} {t_normal * 1e3:>9.1f} {1.0:>13.2f}")
        for sigma in (1.0, 10.0, 1000.0):
            t = best_time(lambda sigma=sigma, rng=rng: sample_discrete_gaussian(sigma, n, rng=rng), args.repeat)
            label = f"discrete_gaussian s={sigma:g}"
            print(f"{gname:<11} {label:<24} {n / t:>14,.0f} {t * 1e3:>9.1f} {t / t_normal:>13.2f}")
        for var in (1.0, 100.0, 1e6):
            t = best_time(lambda var=var, rng=rng: sample_skellam(var, n, rng=rng), args.repeat)
            label = f"skellam v={var:g}"
            print(f"{gname:<11} {label:<24} {n / t:>14,.0f} {t * 1e3:>9.1f} {t / t_normal:>13.2f}")
    print()
    rng = generators["AESCounter"]()
    for sigma in (1.0, 1000.0):
        t0 = time.perf_counter()
        sample_discrete_gaussian_exact(sigma, args.exact_n, rng=rng)
        t = time.perf_counter() - t0
        print(
            f"exact sampler (AESCounter) s={sigma:g}: {args.exact_n / t:,.0f} samples/s "
            f"({args.exact_n:,} samples in {t:.2f} s)"
        )


if __name__ == "__main__":
    main()
