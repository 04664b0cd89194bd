"""The two aggregation modes: the real secure-aggregation protocol, and the ideal aggregator.

Both receive the same encoded, noised vectors and the same dropout pattern and return the modular sum of
the clients whose masked input arrived (tested bit for bit). The ideal aggregator skips the cryptography
and computes that sum directly (used for large privacy/utility sweeps).

Dropout model: every client that checked in drops at each protocol stage, in order, with probability p'
(independently), and stays silent from its first dropped stage on. A client that drops at
``advertise_keys``, ``share_keys`` or ``masked_input`` contributes neither data nor noise; one that drops
at ``unmasking`` already sent its masked input, which is included.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from secagg_dp import zq

__all__ = ["STAGES", "INCLUDED_FROM", "draw_dropouts", "included_clients", "ideal_aborts", "crypto_aggregate"]

STAGES = ("advertise_keys", "share_keys", "masked_input", "unmasking")
INCLUDED_FROM = STAGES.index("unmasking")  # dropping at this stage or later keeps the input in the sum


def draw_dropouts(ids: list[int], dropout: float, rng: np.random.Generator) -> dict[str, set[int]]:
    """Per-stage dropout sets: each client drops at each stage with probability ``dropout``, first drop wins."""
    coins = rng.random((len(ids), len(STAGES))) < dropout
    out: dict[str, set[int]] = {s: set() for s in STAGES}
    for cid, row in zip(ids, coins):
        hit = np.flatnonzero(row)
        if hit.size:
            out[STAGES[int(hit[0])]].add(int(cid))
    return out


def included_clients(ids: list[int], dropouts: Mapping[str, set[int]]) -> frozenset[int]:
    """Clients whose masked input arrives: not dropped before the unmasking stage."""
    gone = set().union(*(dropouts.get(s, set()) for s in STAGES[:INCLUDED_FROM]))
    return frozenset(int(c) for c in ids if c not in gone)


def ideal_aborts(ids: list[int], dropouts: Mapping[str, set[int]], threshold: int) -> bool:
    """Whether the real protocol would abort: fewer than t clients left at some stage (or t > checked-in).

    Exact for the full graph; for SecAgg+ the protocol checks t per neighbourhood, which this global count
    does not see (the crypto mode reports the protocol's own decision).
    """
    threshold = max(threshold, 2)
    alive = len(ids)
    if alive < threshold:
        return True
    for stage in STAGES:
        alive -= len(dropouts.get(stage, ()))
        if alive < threshold:
            return True
    return False


def crypto_aggregate(
    ids: list[int],
    vectors: np.ndarray,
    *,
    bits: int,
    threshold: int,
    dropouts: Mapping[str, set[int]],
    neighbours: int | None,
    seed: int,
    security: str = "active",
) -> tuple[np.ndarray, frozenset[int]]:
    """Run the full protocol (``protocols.run_secagg_round``) on the clients' vectors."""
    from protocols import run_secagg_round

    inputs = {int(cid): vectors[i] for i, cid in enumerate(ids)}
    drops = {s: set(v) for s, v in dropouts.items() if v}
    result = run_secagg_round(
        inputs, modulus_bits=bits, threshold=threshold, dropouts=drops or None, neighbours=neighbours, seed=seed,
        security=security,
    )
    return zq.check_residues("aggregate", result.aggregate, bits), frozenset(result.survivors)
