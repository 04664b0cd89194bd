"""Cost of add-then-remove noise enforcement, against the same round without it, measured in the same run.

One active SecAgg+ round (``run_secagg_round``, the path the simulator's crypto mode runs), n clients, k = 32
neighbours, t = 17, d = 10^5 values of 20 bits, 5 % of the clients dropping after sharing keys (before their
masked input), tolerance D = floor(0.1 n) (10 % of the roster), log2 grouping: the server removes the groups
above the 5 % that dropped.

* client CPU per client: CPU time of the clients' message handling / n (``time.process_time``). The round
  without enforcement gets, per client, the noise it would add itself (``sample_skellam`` of d values at the
  per-client variance mu / N, timed here) added to its protocol time, so both sides include all the noise a
  client draws.
* upload per client: the largest upload (bytes counted by the transport) with and without enforcement.
* extra work per client: G seeded components (8 bytes of AES-CTR keystream per value plus an inverse-CDF
  lookup) and the bytes of the G noise-seed shares per box, the commitment and the revealed shares.

Targets (same-run ratios): client CPU <= 1.5x, upload <= 1.2x.
Run: python benchmarks/bench_enforcement.py [--n 50] [--d 100000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from protocols.pool import InProcessClientPool, seeded_sources
from protocols.round import run_pooled_round
from secagg_dp.noise import sample_skellam
from secagg_dp.noise.add_then_remove import NoiseSpec

K, T, BITS = 32, 17, 20
PER_CLIENT_VARIANCE = 1e4  # grid noise variance one client adds without enforcement (sigma_int = 100)


class _TimedPool(InProcessClientPool):
    """The in-process pool, with the CPU time (``time.process_time``, this single-threaded process) the clients
    spend handling each stage's messages: robust to other load on the machine, unlike wall-clock time."""

    cpu = 0.0

    def deliver(self, stage, envelopes):  # noqa: ANN001, ANN201
        t0 = time.process_time()
        out = super().deliver(stage, envelopes)
        self.cpu += time.process_time() - t0
        return out


def one_round(n: int, d: int, noise: NoiseSpec | None):  # noqa: ANN201
    """One round; returns (SecAggResult, client CPU seconds per client)."""
    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << 10, size=d, dtype=np.uint64) for i in range(n)}
    pool = _TimedPool(inputs)
    res = run_pooled_round(
        pool,
        sorted(inputs),
        d,
        bits=BITS,
        threshold=T,
        neighbours=K,
        dropouts={"masked_input": set(range(0, n, 20))},
        seed=1,
        round_id=seeded_sources(1)[0],
        noise=noise,
    )
    return res, pool.cpu / n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--d", type=int, default=10**5)
    args = ap.parse_args(argv)
    n, d = args.n, args.d
    spec = NoiseSpec(PER_CLIENT_VARIANCE * n, 0.1)
    sched = spec.schedule(n)
    base, proto_base = one_round(n, d, None)
    t0 = time.process_time()
    for _ in range(5):
        sample_skellam(PER_CLIENT_VARIANCE, d)  # rng=None: the AES-CTR generator a deployed client uses
    own_noise = (time.process_time() - t0) / 5
    enf, cpu_enf = one_round(n, d, spec)
    cpu_base = proto_base + own_noise
    up_base = int(base.communication.upload_bytes.max())
    up_enf = int(enf.communication.upload_bytes.max())
    down_base = int(base.communication.download_bytes.max())
    down_enf = int(enf.communication.download_bytes.max())
    g = sched.groups
    print(
        f"add-then-remove, n={n} (D={sched.max_dropouts}, G={g} groups, boundaries {sched.boundaries}), k={K}, t={T}, "
        f"d={d:,}, {BITS} bits, active SecAgg+, {len(range(0, n, 20))} clients dropping before their input; "
        f"removed groups {enf.noise_removed}"
    )
    print(
        f"client CPU per client: {cpu_enf * 1e3:.1f} ms with enforcement vs {cpu_base * 1e3:.1f} ms without "
        f"(protocol {proto_base * 1e3:.1f} ms + own noise {own_noise * 1e3:.1f} ms; CPU time): "
        f"ratio {cpu_enf / cpu_base:.2f} (target <= 1.5)"
    )
    print(
        f"upload per client (max): {up_enf / 1e3:.1f} kB vs {up_base / 1e3:.1f} kB: ratio {up_enf / up_base:.3f} "
        f"(target <= 1.2); extra {(up_enf - up_base) / 1e3:.2f} kB = {g} x 32 B of seed shares per box x {K} boxes "
        f"+ 32 B commitment + revealed shares; download {down_enf / 1e3:.1f} kB vs {down_base / 1e3:.1f} kB"
    )
    print(
        f"extra PRG per client: {g} seeded components of d values (8 B of AES-CTR keystream each: "
        f"{g * 8 * d / 1e6:.1f} MB) plus level 0; the masks take {K + 1} x {4 * d / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    main()
