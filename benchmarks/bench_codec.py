"""Benchmark of the Z_q codec at d = 2^20 (figures, not a test).

Prints the best-of-R wall time of: the orthonormal Hadamard round trip (fwht∘fwht), ZqCodec.encode of one
vector (clip, rotate, scale, conditional rounding, noise add, wrap; default cryptographically strong rng),
ZqCodec.decode, and a batched encode of 10^5 clients × 16 coordinates. Each is divided by baselines measured
in the same run on the same length: ``np.fft.fft`` (an O(d log d) transform) and a plain numpy
copy-and-scale (memory-bound floor). Target from issue 2: Hadamard round trip < 0.3 s.

Usage: python benchmarks/bench_codec.py [--repeats R]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from secagg_dp.quantize import ZqCodec, fwht
from secagg_dp.zq import sum_mod


def best_of(fn: Callable[[], object], repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    r = args.repeats

    d = 1 << 20
    rng = np.random.default_rng(0)
    x = rng.normal(size=d)
    codec = ZqCodec(
        d, 32, 1.0, ZqCodec.scale_for(bits=32, n_clients=1000, clip=1.0, dim=d, sigma=1e-3), rotation_seed=1
    )
    noise = rng.integers(-1000, 1000, size=d, dtype=np.int64)
    enc = codec.encode(x, noise=noise)
    codec.decode(enc)  # warm the cached signs

    t_fft = best_of(lambda: np.fft.fft(x), r)
    t_copy = best_of(lambda: x * 1.5, r)
    t_h = best_of(lambda: fwht(fwht(x)), r)
    t_enc = best_of(lambda: codec.encode(x, noise=noise), r)
    t_dec = best_of(lambda: codec.decode(enc), r)

    n, small = 100_000, 16
    batch_codec = ZqCodec(small, 24, 1.0, 100.0, rotation_seed=2)
    xb = rng.normal(size=(n, small))
    t_batch = best_of(lambda: sum_mod(batch_codec.encode(xb), 24), max(1, r // 2))
    t_batch_base = best_of(lambda: xb.sum(axis=0), r)

    print(f"d = 2^20 = {d}, best of {r} runs, numpy {np.__version__}")
    print(f"{'operation':<42}{'seconds':>10}{'/ fft':>10}{'/ copy':>10}")
    print(f"{'baseline np.fft.fft(x)':<42}{t_fft:>10.4f}{1.0:>10.2f}{t_fft / t_copy:>10.1f}")
    print(f"{'baseline x * 1.5 (copy+scale)':<42}{t_copy:>10.4f}{t_copy / t_fft:>10.2f}{1.0:>10.1f}")
    for name, t in (
        ("Hadamard round trip fwht(fwht(x))", t_h),
        ("ZqCodec.encode (1 vector, noise, wrap)", t_enc),
        ("ZqCodec.decode (1 vector)", t_dec),
    ):
        print(f"{name:<42}{t:>10.4f}{t / t_fft:>10.2f}{t / t_copy:>10.1f}")
    verdict = "meets" if t_h < 0.3 else "MISSES"
    print(f"Hadamard round trip {t_h:.3f} s {verdict} the < 0.3 s target")
    print(
        f"batched encode + modular sum, {n} clients x {small} coords: {t_batch:.3f} s "
        f"({t_batch / n * 1e6:.2f} us/client; {t_batch / t_batch_base:.0f}x a plain float sum of the batch)"
    )


if __name__ == "__main__":
    main()
