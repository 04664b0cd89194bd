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

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from secagg_dp import zq
from secagg_dp.errors import AbortError
from secagg_dp.stages import NOISE_LOST_STAGES, stages_for

if TYPE_CHECKING:  # the protocol is imported where a round runs (the ideal mode never loads it)
    from protocols import ClientPool, LazyInputs, RoundPlan, SecAggResult
    from secagg_dp.noise.add_then_remove import NoiseSpec

__all__ = [
    "STAGES",
    "INCLUDED_FROM",
    "NO_DROP",
    "draw_drop_stages",
    "dropout_sets",
    "draw_dropouts",
    "included_clients",
    "ideal_aborts",
    "aborts_from_counts",
    "abort_reason",
    "ROSTER_STAGE",
    "round_plan",
    "crypto_round",
]

# The protocol's stages (secagg_dp.stages) without the active-only consistency stage, which the dropout model does
# not draw: a client silent there has already sent its masked input, so it is in the sum like one silent at
# unmasking. One dropout coin per stage, so the random stream is that of these 4 stages.
STAGES = stages_for("semi-honest")
INCLUDED_FROM = len(NOISE_LOST_STAGES)  # dropping at this stage or later keeps the input in the sum
NO_DROP = len(STAGES)  # stage index of a client that never drops
_ROWS = 1 << 18  # clients per chunk of coins: bounded memory at n = 10^7


def draw_drop_stages(n: int, dropout: float, rng: np.random.Generator) -> np.ndarray:
    """First stage each of ``n`` clients drops at (int8; ``NO_DROP`` if none), each stage with prob. ``dropout``.

    Consumes ``rng.random((n, len(STAGES)))`` in row order, drawn in chunks of rows (the same stream as one call).
    """
    out = np.full(n, NO_DROP, dtype=np.int8)
    for lo in range(0, n, _ROWS):
        coins = rng.random((min(_ROWS, n - lo), len(STAGES))) < dropout
        hit = coins.any(axis=1)
        out[lo : lo + len(coins)][hit] = coins[hit].argmax(axis=1)
    return out


def dropout_sets(ids: np.ndarray, stages: np.ndarray) -> dict[str, set[int]]:
    """The per-stage dropout sets (client ids) of a ``draw_drop_stages`` result."""
    ids = np.asarray(ids)
    return {s: {int(c) for c in ids[stages == i]} for i, s in enumerate(STAGES)}


def draw_dropouts(ids: list[int], dropout: float, rng: np.random.Generator) -> dict[str, set[int]]:
    """Per-stage dropout sets: each client drops at each stage with probability ``dropout``, first drop wins."""
    return dropout_sets(np.asarray(ids, dtype=np.int64), draw_drop_stages(len(ids), dropout, rng))


def included_clients(ids: list[int], dropouts: Mapping[str, set[int]]) -> frozenset[int]:
    """Clients whose masked input arrives: not dropped before the unmasking stage."""
    gone = set().union(*(dropouts.get(s, set()) for s in STAGES[:INCLUDED_FROM]))
    return frozenset(int(c) for c in ids if c not in gone)


def ideal_aborts(
    ids: list[int], dropouts: Mapping[str, set[int]], threshold: int, min_roster: int | None = None
) -> bool:
    """Whether the real protocol would abort: fewer than t clients left at some stage (or t > checked-in), or
    a roster below ``min_roster`` (the clients' own minimum roster; ``None``: no such floor).

    Exact for the full graph; for SecAgg+ the protocol checks t per neighbourhood, which this global count
    does not see (the crypto mode reports the protocol's own decision).
    """
    return aborts_from_counts(len(ids), [len(dropouts.get(s, ())) for s in STAGES], threshold, min_roster)


def aborts_from_counts(
    checked_in: int, dropped_per_stage: list[int], threshold: int, min_roster: int | None = None
) -> bool:
    """:func:`ideal_aborts` from the number checked in and the number dropped at each stage (in order)."""
    dropped = dict(zip(STAGES, dropped_per_stage, strict=False))
    return abort_reason(checked_in, dropped, threshold, min_roster) is not None


#: The stage after which the roster is fixed: the clients that advertised keys (the server's key roster).
ROSTER_STAGE = STAGES[0]


def abort_reason(
    checked_in: int, dropped: Mapping[str, int], threshold: int, min_roster: int | None = None
) -> str | None:
    """Why a round with these counts aborts (``None`` if it does not): fewer than the threshold t clients
    checked in, or left after a stage (clients dropped at each stage of :data:`STAGES`, in order), or a roster
    (the clients left after :data:`ROSTER_STAGE`) below ``min_roster``, which every active client refuses
    (``protocols.ClientPolicy.min_roster``; it checks the threshold first, so a roster below both gives the
    threshold's reason). ``None``: no roster floor (semi-honest clients check none)."""
    threshold = max(threshold, 2)
    alive = checked_in
    if alive < threshold:
        return "fewer than the threshold t clients checked in"
    for stage in STAGES:
        alive -= dropped.get(stage, 0)
        if alive < threshold:
            return f"fewer than the threshold t clients left after stage {stage}"
        if stage == ROSTER_STAGE and min_roster is not None and alive < min_roster:
            return f"a roster of fewer than secagg.min_roster = {min_roster} clients after stage {stage}"
    return None


def round_plan(
    ids: Sequence[int],
    dim: int,
    dropouts: Mapping[str, set[int]],
    *,
    bits: int,
    threshold: int,
    neighbours: int | None,
    seed: int,
    security: str = "active",
    noise: NoiseSpec | None = None,
    min_roster: int | None = None,
) -> RoundPlan:
    """The simulator's round configuration, one :class:`protocols.RoundPlan` (:func:`protocols.round_plan`
    checks it): the clients ``ids`` with vectors of length ``dim`` (residues mod 2^bits), the round id derived
    from ``seed`` (``protocols.pool.seeded_sources``, not drawn afresh, so a seed reproduces every message, and
    with it the graph and the bytes counted, on any pool), and every client's minimum roster ``min_roster``.
    Raises :class:`~secagg_dp.errors.AbortError` when fewer than ``min_roster`` clients checked in in active
    mode: every client refuses the roster, so the round aborts before it starts."""
    from protocols import round_plan as checked_plan
    from protocols.pool import seeded_sources

    drops = {s: set(v) for s, v in dropouts.items() if v}
    # Every client's own minimum roster (protocols.ClientPolicy.min_roster; an active SecAgg+ client needs one):
    # the simulator passes its configuration's secagg.min_roster (SimConfig.min_roster), a function of the
    # population model (n, p, p') only, never of the round's outcome; None: 2, no floor beyond the policy's own
    # (the threshold, or neighbours + 2 under SecAgg+). A roster below it is refused by every active client.
    min_roster = 2 if min_roster is None else min_roster
    if min_roster > len(ids):  # the roster can only be smaller: every active client refuses it
        if security == "active":
            raise AbortError(
                f"{len(ids)} clients checked in, fewer than the clients' minimum roster {min_roster}: every client "
                "refuses the roster"
            )
        min_roster = max(2, len(ids))  # semi-honest clients check no roster floor (ClientPolicy)
    return checked_plan(
        ids,
        dim,
        bits=bits,
        threshold=threshold,
        dropouts=drops,
        neighbours=neighbours,
        security=security,
        seed=seed,
        round_id=seeded_sources(seed)[0],
        min_roster=min_roster,
        noise=noise,
    )


def crypto_round(
    clients: LazyInputs | ClientPool,
    plan: RoundPlan,
    dropouts: Mapping[str, set[int]],
    ids: Sequence[int] | None = None,
) -> SecAggResult:
    """Run the full protocol for ``plan`` (:func:`round_plan`): the server here, the clients where ``clients``
    puts them, and return the ``protocols.SecAggResult`` (aggregate checked as residues mod 2^bits, survivors,
    reports, timings and the bytes each client sent and received, ``communication``). ``dropouts``: stage ->
    clients silent from it on.

    ``clients`` is a :class:`protocols.LazyInputs` (each client's input made by ``make(cid)`` where its client
    is built: in this process, or in the forked worker of ``protocols.procpool.client_pool`` holding the
    client's shard, which calls ``make`` for its own clients only; the simulator's
    :class:`~simulations.clients.BlockInputs` encodes a few rows of one block at a time, so no participants x d
    array exists), or a client pool that already holds the inputs (``simulations.crypto_pool.DaskClientPool``),
    whose clients are ``ids`` (default: the pool's ``ids``). Same plan and inputs, same result on any pool."""
    from protocols import LazyInputs, run_plan
    from protocols.procpool import client_pool

    drops = {s: set(v) for s, v in dropouts.items() if v} or None
    if isinstance(clients, LazyInputs):
        inputs = LazyInputs(clients.ids, clients.make, plan.dim)  # checks dim
        with client_pool(inputs) as pool:  # forked workers over the usable cores for a large round; same result
            result = run_plan(pool, list(inputs.ids), plan, dropouts=drops)
    else:
        members = list(getattr(clients, "ids", ()) if ids is None else ids)
        result = run_plan(clients, members, plan, dropouts=drops)
    return replace(result, aggregate=zq.check_residues("aggregate", result.aggregate, plan.bits))
