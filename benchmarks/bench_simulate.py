"""Per-round cost breakdown of the simulator (printed figures, not a test).

Two configurations (issue 7):
  * full crypto: n = 100 clients, d = 10^4, through protocols.run_secagg_round;
  * ideal aggregator: n = 10^5 clients, d = 10^3, modular sum computed directly.
Stages timed: check-in (+ dropout draw), encode (clip, rotate, scale, conditional rounding, wrap),
noise (discrete Gaussian; Skellam in the ideal run), mask + unmask (the protocol; the ideal mode's exact modular sum instead),
decode, account (one PrivacyLedger.spend: SQLite commit + epsilon; the per-run mixture RDP is printed
separately as accountant setup). Baseline measured in the same run: numpy's float64 sum
of the same n x d client vectors; the ratio says what the whole private round costs relative to it.

    python benchmarks/bench_simulate.py [--quick]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def bench(n: int, dim: int, mode: str, rounds: int = 1) -> dict[str, float]:
    from secagg_dp import zq
    from simulations import aggregators
    from simulations.clients import draw_noise, make_codec
    from simulations.config import build_config
    from simulations.privacy import make_accountant
    from simulations.runner import _round_int, _round_rng, plan, select_participants

    cfg = build_config({
        "mode": mode, "rounds": rounds, "seed": 1,
        "population": {"clients": n, "checkin": 1.0 if mode == "crypto" else 0.5, "dropout": 0.0},
        "secagg": {"bits": 32, "threshold_fraction": 0.5},
        "privacy": {"mechanism": "ddg", "noise_multiplier": 4.0},
        "task": {"name": "mean", "dim": dim},
    })
    p = plan(cfg, 1)
    times = dict.fromkeys(["check-in", "encode", "noise", "mask+unmask", "decode", "account"], 0.0)
    clients = 0
    with tempfile.TemporaryDirectory() as tmp:
        acct, setup = _timed(make_accountant, cfg, p, Path(tmp) / "ledger.sqlite")
        for r in range(1, rounds + 1):
            t0 = time.perf_counter()
            ids = select_participants(cfg, 1, r)
            drops = aggregators.draw_dropouts(ids, 0.0, _round_rng(1, r, 1))
            times["check-in"] += time.perf_counter() - t0
            clients += len(ids)
            codec = make_codec(p.dim, cfg.secagg.bits, 1.0, p.scale, _round_int(1, r, 2), cfg.privacy.beta)
            rng = np.random.default_rng(r)
            acc = np.zeros(codec.padded_dim, dtype=np.uint64)
            rows = []
            block = 1024
            for i in range(0, len(ids), block):
                m = len(ids[i : i + block])
                x = rng.standard_normal((m, dim))
                x /= np.linalg.norm(x, axis=1, keepdims=True)
                enc, dt = _timed(codec.encode, x, rng=rng)
                times["encode"] += dt
                noise, dt = _timed(draw_noise, cfg.privacy.mechanism, p.sigma_int, m * codec.padded_dim, rng)
                times["noise"] += dt
                t1 = time.perf_counter()
                vec = zq.add_mod(enc, zq.wrap_int64(noise.reshape(m, -1), cfg.secagg.bits), cfg.secagg.bits)
                times["encode"] += time.perf_counter() - t1
                if mode == "crypto":
                    rows.append(vec)
                else:
                    t1 = time.perf_counter()
                    acc = zq.add_mod(acc, zq.sum_mod(vec, cfg.secagg.bits), cfg.secagg.bits)
                    times["mask+unmask"] += time.perf_counter() - t1
            if mode == "crypto":
                vectors = np.concatenate(rows)
                (acc, _), dt = _timed(
                    aggregators.crypto_aggregate, ids, vectors, bits=cfg.secagg.bits, threshold=len(ids) // 2 + 1,
                    dropouts=drops, neighbours=None, seed=r,
                )
                times["mask+unmask"] += dt
            _, dt = _timed(codec.decode, acc)
            times["decode"] += dt
            _, dt = _timed(acct.record_round)
            times["account"] += dt
        close = getattr(acct, "close", None)
        if close:
            close()
    # baseline: plain float64 sum of the same number of client vectors
    x = np.random.default_rng(0).standard_normal((min(clients // rounds, 20000), dim))
    reps = max(1, (clients // rounds) // len(x))
    _, base = _timed(lambda: [x.sum(axis=0) for _ in range(reps)])
    total = sum(times.values()) / rounds
    print(f"\n{mode} aggregator: n = {n}, d = {dim} (padded {p.padded_dim}), bits = {cfg.secagg.bits}, "
          f"{clients / rounds:.0f} participants/round, {rounds} round(s)")
    for k, v in times.items():
        print(f"  {k:<12} {v / rounds * 1e3:10.1f} ms   {100 * v / rounds / total:5.1f} %")
    print(f"  {'total':<12} {total * 1e3:10.1f} ms   -> {clients / rounds / total:,.0f} clients/s")
    print(f"  (once per run: accountant setup, check-in mixture RDP over n = {n}: {setup * 1e3:.1f} ms)")
    print(f"  baseline (float64 sum of the same vectors) {base * 1e3:.1f} ms; private round / baseline = {total / base:,.0f}x")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (smoke test)")
    args = ap.parse_args()
    # galois compiles its GF(65537) kernels with numba on first use in a process (~3 s here); measure that
    # once, apart, so the per-round figures are steady-state costs.
    from protocols import run_secagg_round

    t0 = time.perf_counter()
    run_secagg_round({i: np.zeros(8, dtype=np.uint64) for i in range(3)}, modulus_bits=8, threshold=2, seed=0)
    print(f"one-time warm-up (galois/numba JIT of the Shamir field): {time.perf_counter() - t0:.2f} s")
    if args.quick:
        bench(20, 1000, "crypto")
        bench(5000, 1000, "ideal")
    else:
        bench(100, 10_000, "crypto")
        bench(100_000, 1000, "ideal")


if __name__ == "__main__":
    main()
