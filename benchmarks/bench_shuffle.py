"""Shuffle Gaussian lower bound: time for all orders 2..1024, and ratio vs LT22 Algorithm 1 at λ ≤ 40.

Baseline measured in the same run: the partition method (LT22 Algorithm 1) summed over orders 2..L for
L in (20, 30, 40). Run: python benchmarks/bench_shuffle.py
"""

from __future__ import annotations

import time

import numpy as np

from secagg_dp.accounting.shuffle.gaussian import shuffle_gaussian_rdp, shuffle_gaussian_rdp_partition


def _best(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    sigma = 9.48
    for n in (60_000, 600_000, 10**9, 1024, 100):
        t = _best(lambda n=n: shuffle_gaussian_rdp(np.arange(2, 1025), n=n, sigma=sigma))
        print(f"fast, orders 2..1024, n={n:>10}: {t * 1e3:8.1f} ms")
    for L in (20, 30, 40):
        orders = np.arange(2, L + 1)
        n = 60_000
        t_fast = _best(lambda orders=orders, n=n: shuffle_gaussian_rdp(orders, n=n, sigma=sigma))
        t_part = _best(
            lambda orders=orders, n=n: [shuffle_gaussian_rdp_partition(int(o), n=n, sigma=sigma) for o in orders],
            repeat=1,
        )
        print(f"orders 2..{L}: partition {t_part:8.3f} s, fast {t_fast * 1e3:6.2f} ms, ratio {t_part / t_fast:9.0f}x")


if __name__ == "__main__":
    main()
