"""Download bytes per client per round of active SecAgg+ (k = 32), counted from the serialised downlink
messages of one seeded in-process round (a broadcast counts once per client), next to what the whole roster
and the whole survivor list would cost at the same n (the design they replace: 132 bytes per roster entry,
4 bytes per survivor, to every client), and the roster multiproof at n = 10^6 computed with the same tree.

d = 16, 20 bits, t = 22, 10% of the clients silent from the masked input on; mean and max over the clients
that took part in every stage. Bytes, not time: nothing here depends on the machine.

Run: python benchmarks/bench_roster_download.py [n ...]   (default: 100 1000)
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict

import numpy as np

from protocols import messages as m
from protocols.pki import KeyRegistry
from protocols.pool import InProcessClientPool, RoundPlan
from protocols.round import drive_round
from protocols.server import SecAggServer
from protocols.transport import InProcessTransport

K, T, DIM, BITS = 32, 22, 16, 20


def measure(n: int) -> None:
    ids = list(range(n))
    pool = InProcessClientPool({c: np.zeros(DIM, np.uint64) for c in ids})
    rid = b"b" * 16
    # every client expects the whole roster: all n check in (the dropouts fall silent later, at masked_input)
    plan = RoundPlan(
        bits=BITS, dim=DIM, threshold=T, neighbours=K, security="active", round_id=rid, seed=1, min_roster=n
    )
    registry = KeyRegistry(pool.identities(plan))
    silent = {c: "masked_input" for c in ids[::10]}
    pool.start(plan, registry, silent)
    server = SecAggServer(
        bits=BITS, dim=DIM, threshold=T, neighbours=K, registry=registry, round_id=rid, source=plan.server_source()
    )
    transport = InProcessTransport(rng=np.random.default_rng(0), keep_log=True)
    drive_round(server, pool, transport)
    per_kind: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for phase, env in transport.log:
        if phase.endswith(":down"):
            for c in ids if env.recipient == m.BROADCAST else [env.recipient]:
                per_kind[env.kind.name][c] += len(env.payload)
    full = [c for c in ids if c not in silent]
    total = np.array([sum(d.get(c, 0) for d in per_kind.values()) for c in full])
    kinds = ", ".join(f"{k} {np.mean([d.get(c, 0) for c in full]):.0f}" for k, d in per_kind.items())
    before = 132 * n + 4 * len(full)  # whole roster and whole survivor list, per client
    print(
        f"n = {n}: download per client mean {total.mean():.0f} B ({total.mean() / 1024:.1f} KiB), "
        f"max {total.max():.0f} B; per kind (mean B): {kinds}; whole roster + survivor list alone: {before} B"
    )


def proof_at(n: int, rows: int = K + 1, trials: int = 5) -> float:
    """Mean multiproof length (hashes) of ``rows`` pseudorandom leaves among n: the counting rule of
    ``secagg_dp.crypto.merkle.MerkleTree.multiproof`` on the tree's shape, without hashing n leaves."""
    depth, rng, out = (n - 1).bit_length(), random.Random(n), []
    for _ in range(trials):
        known, count = sorted(rng.sample(range(n), rows)), 0
        for height in range(depth):
            have = set(known)
            count += sum(1 for i in known if i ^ 1 not in have and (i ^ 1) << height < n)
            known = sorted({i >> 1 for i in known})
        out.append(count)
    return sum(out) / trials


if __name__ == "__main__":
    for n in [int(a) for a in sys.argv[1:]] or [100, 1000]:
        measure(n)
    for n in (10**4, 10**6):
        p = proof_at(n)
        print(f"n = {n}: roster entries {(K + 1) * 136} B + multiproof {p:.0f} hashes = {p * 32:.0f} B (computed)")
