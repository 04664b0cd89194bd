"""One secure-aggregation round end to end: :func:`run_secagg_round` and the lower-level :func:`drive_round`."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

import numpy as np

from protocols import messages as m
from protocols.client import SecAggClient
from protocols.communication import Communication
from protocols.pki import KeyRegistry
from protocols.pool import ClientPool, InProcessClientPool, LazyInputs, RoundPlan
from protocols.procpool import client_pool
from protocols.security import check_security, min_threshold
from protocols.server import DeferredOutgoing, SecAggServer
from protocols.stages import STAGE_NAMES
from protocols.transport import Envelope, FaultInjector, InProcessTransport, LazyEnvelopes
from secagg_dp._validate import check_int
from secagg_dp.crypto import shamir
from secagg_dp.errors import ParameterError, ProtocolError
from secagg_dp.noise.add_then_remove import NoiseSpec
from secagg_dp.stages import PROTOCOL_STAGES, stages_for
from secagg_dp.zq import check_bits, check_residues

__all__ = ["SecAggResult", "run_secagg_round", "run_pooled_round", "round_plan", "run_plan", "drive_round", "STAGES"]

STAGES = PROTOCOL_STAGES  # the library's stage model (secagg_dp.stages), the keys of STAGE_NAMES in order


@dataclass(frozen=True)
class SecAggResult:
    """Outcome of a completed round.

    ``aggregate``: sum mod 2^bits of the inputs of ``survivors`` (the clients whose masked input arrived);
    ``dropped``: clients that shared keys but whose masked input did not arrive; ``reports``: rejected
    messages and recovered faults; ``timings``: seconds per phase (all clients + server, sequential);
    ``communication``: bytes each client sent and received per stage (:class:`~protocols.communication.Communication`,
    counted by the transport); ``noise_removed``: the add-then-remove noise groups removed from every survivor.
    """

    aggregate: np.ndarray = field(repr=False)
    survivors: frozenset[int]
    dropped: frozenset[int] = frozenset()
    reports: tuple[str, ...] = ()
    timings: Mapping[str, float] = field(default_factory=dict)
    communication: Communication | None = field(default=None, repr=False)
    noise_removed: tuple[int, ...] = ()  # add-then-remove: the noise groups removed from every survivor

    def __post_init__(self) -> None:
        if self.survivors & self.dropped:
            raise ProtocolError("survivor and dropped sets must be disjoint")


def _feed(server: SecAggServer, arrived: list[Envelope], stage: str, reports: list[str]) -> None:
    """Hand the server each arrived envelope in order, emptying ``arrived`` as it goes: each message is let
    go as soon as the server has taken what it keeps (a masked input lives only in the running sum)."""
    arrived.reverse()
    while arrived:
        env = arrived.pop()
        try:
            server.receive(env.payload, sender=env.sender)
        except ProtocolError as e:
            reports.append(f"{stage}: server refused a message from {env.sender}: {e}")


def drive_round(
    server: SecAggServer,
    clients: Mapping[int, SecAggClient] | ClientPool,
    transport: InProcessTransport,
    *,
    silent_from: Mapping[int, str] | None = None,
) -> SecAggResult:
    """Run the stages of ``server``'s security mode over ``transport`` (semi-honest mode has no
    ``"consistency"`` stage). ``clients`` is a dict of constructed clients (run here, one after another) or a
    started :class:`~protocols.pool.ClientPool`. ``silent_from[c] = stage`` makes client c stop responding
    from that stage on (a pool takes it in ``start`` instead). Each uplink envelope is handed to the server
    with its channel sender (the transport's authenticated identity). Rejected messages are reported and
    skipped; AbortError propagates."""
    if isinstance(clients, Mapping):
        pool: ClientPool = InProcessClientPool.of_clients(clients, silent_from)
    elif silent_from:
        raise ParameterError("Argument 'silent_from' is for a dict of clients; a client pool takes it in start().")
    else:
        pool = clients
    reports: list[str] = []
    timings: dict[str, float] = {}
    downlink: Sequence[Envelope] = [Envelope(m.SERVER, m.BROADCAST, server.open_round())]
    for stage in stages_for(server.security):
        t0 = time.perf_counter()
        delivered = transport.deliver(f"{stage}:down", downlink)
        downlink = []  # the pool consumes ``delivered`` message by message (an in-process pool clears it)
        uplink, refused = pool.deliver(stage, delivered)
        del delivered
        reports.extend(refused)
        t1 = time.perf_counter()
        arrived = transport.deliver(f"{stage}:up", uplink)
        del uplink
        _feed(server, arrived, stage, reports)
        nxt = server.advance_deferred()  # per-client messages are built as the pool reads them
        if isinstance(nxt, DeferredOutgoing):
            downlink = LazyEnvelopes(m.SERVER, nxt.recipients, nxt.build)
        else:
            downlink = [Envelope(m.SERVER, r, b) for r, b in nxt]
        del nxt
        t2 = time.perf_counter()
        timings[f"{stage}:clients"] = t1 - t0
        timings[f"{stage}:server"] = t2 - t1
    out = server.outcome
    if out is None:  # advance() sets it on leaving the last stage, or raised AbortError
        raise ProtocolError("the round ended without an outcome")
    return SecAggResult(
        out.aggregate,
        out.survivors,
        out.dropped,
        tuple(reports + server.reports),
        timings,
        communication=transport.communication(),
        noise_removed=out.noise_removed,
    )


def run_secagg_round(
    inputs: Mapping[int, np.ndarray] | LazyInputs,
    *,
    bits: int | None = None,
    threshold: int,
    dropouts: Mapping[str, set[int]] | None = None,
    neighbours: int | None = None,
    security: str = "active",
    seed: int | None = None,
    round_id: bytes | None = None,
    min_roster: int | None = None,
    noise: NoiseSpec | None = None,
    workers: int | None = None,
    modulus_bits: int | None = None,
) -> SecAggResult:
    """Securely aggregate ``inputs`` (client id -> uint64 vector of residues mod 2^bits).

    ``bits``: the modulus q = 2^bits of the inputs and the sum (``modulus_bits``, its earlier name, is still
    accepted with a DeprecationWarning). The round's configuration is one :class:`~protocols.pool.RoundPlan`
    (:func:`round_plan` checks and builds it), handed to the clients' pool and the server (:func:`run_plan`).

    ``inputs`` may also be a :class:`~protocols.pool.LazyInputs` with ``dim`` set: each client's vector is then
    made by ``make(id)`` where its client is built (in its worker process, for its own shard only) and
    checked there like a dict's, so no process holds an n x d array.

    The given clients form the checked-in set (check-in coin p = 1; use :class:`SecAggServer` /
    :meth:`SecAggClient.decide_check_in` for autonomous check-in). ``dropouts`` maps a stage name in
    ``STAGES`` to the clients that stop responding from that stage on. ``neighbours=None`` runs the full
    graph (Bonawitz et al. 2017); an int k runs SecAgg+ (Bell et al. 2020) on a Harary graph of degree k.

    ``security="active"`` (default) runs the malicious-server protocol (Bonawitz et al. 2017, Sec. 6):
    identity keys registered in a :class:`~protocols.pki.KeyRegistry` created here, signed keys, the
    consistency round, and thresholds the clients themselves insist on: t > 2n/3 on the full graph,
    t > (k + 1)/2 with SecAgg+ (choose (k, t) with :func:`secaggplus_parameters`). ``"semi-honest"`` is
    the trusted-server protocol (any t >= 2). See docs/secure-aggregation.md for the threat model.

    ``seed=None`` (default) takes every key, seed, nonce and the round id from ``os.urandom``. An int seed
    derives keys, seeds, nonces and the delivery order deterministically from (seed, round id): the run is
    then reproducible but **for simulation only** -- anyone who knows the seed can unmask every client.
    ``round_id`` (16 bytes; default random) labels the round; the round id on the wire binds it to a nonce the
    server draws for each execution (:func:`protocols.wire.execution_round_id`), so messages of one run are
    refused in another even when the caller reuses the label. With a seed the nonce is seeded too: a pinned
    round id and seed reproduce every message bit for bit (simulation only, like the seed itself).

    ``min_roster``: the smallest roster an active client accepts (its own idea of the population, see
    :class:`~protocols.security.ClientPolicy`); default: every client that does not drop out at
    ``"advertise_keys"``, which is what an honest server admits here.

    ``noise``: add-then-remove noise enforcement (:class:`~secagg_dp.noise.add_then_remove.NoiseSpec`;
    docs/noise-enforcement.md): every client adds level 0 and every removable group of Skellam noise, shares the
    groups' seeds with its share holders, and the server removes the survivors' groups above the dropout count.

    ``workers``: processes the clients run in (:func:`~protocols.procpool.client_pool`): ``None`` (default)
    forks one per usable core when there are two or more and at least
    :data:`~protocols.procpool.MIN_CLIENTS_PER_WORKER` clients each, ``1`` keeps them in this process. The
    server and the transport run here either way, and a seeded round is the same bit for bit.

    Returns a :class:`SecAggResult`; raises :class:`~secagg_dp.errors.AbortError` (a ``ProtocolError``) when
    the round must abort, in which case nothing is reconstructed.
    """
    bits = _bits(bits, modulus_bits)
    source: Mapping[int, np.ndarray] | LazyInputs
    if isinstance(inputs, LazyInputs):
        source, dim = _checked_lazy(inputs, bits)
        ids = list(source.ids)
    else:
        if not isinstance(inputs, Mapping) or not inputs:
            raise ParameterError("Argument 'inputs' must be a non-empty dict {client id: uint64 vector} or LazyInputs.")
        vecs: dict[int, np.ndarray] = {}
        dim = 0
        for cid, x in inputs.items():
            cid = check_int("inputs key", cid, lo=0, hi=m.MAX_CLIENT_ID, strict=True)
            arr = check_residues(f"inputs[{cid}]", x, bits)
            if arr.ndim != 1 or arr.size == 0:
                raise ParameterError(f"Argument 'inputs[{cid}]' must be a non-empty 1-D vector, not shape {arr.shape}.")
            if dim and arr.size != dim:
                raise ParameterError(
                    f"Argument 'inputs' must hold vectors of one length; client {cid} has {arr.size}, not {dim}."
                )
            dim = arr.size
            vecs[cid] = arr
        ids, source = sorted(vecs), vecs
        del vecs
    with client_pool(source, workers) as pool:
        del source  # the pool holds the inputs now (a dict's vectors go as their clients pack them)
        return run_pooled_round(
            pool,
            ids,
            dim,
            bits=bits,
            threshold=threshold,
            dropouts=dropouts,
            neighbours=neighbours,
            security=security,
            seed=seed,
            round_id=round_id,
            min_roster=min_roster,
            noise=noise,
        )


def _checked_lazy(inputs: LazyInputs, bits: int) -> tuple[LazyInputs, int]:
    """``inputs`` with every made vector checked as :func:`run_secagg_round` checks a dict's (residues mod
    2^bits, 1-D, length ``inputs.dim``), and that length; ``dim`` and the ids are checked now."""
    if inputs.dim is None:
        raise ParameterError("Argument 'inputs': LazyInputs needs dim (the vectors' length) for run_secagg_round.")
    for cid in inputs.ids:
        check_int("inputs id", cid, lo=0, hi=m.MAX_CLIENT_ID, strict=True)
    dim, make = inputs.dim, inputs.make

    def checked(cid: int) -> np.ndarray:
        arr = check_residues(f"inputs[{cid}]", make(cid), bits)
        if arr.ndim != 1 or arr.size != dim:
            raise ParameterError(
                f"Argument 'inputs[{cid}]' must be a 1-D vector of length {dim}, not shape {arr.shape}."
            )
        return arr

    return LazyInputs(inputs.ids, checked, dim), dim


def _bits(bits: int | None, modulus_bits: int | None) -> int:
    """``bits``, or the deprecated ``modulus_bits`` (with a DeprecationWarning); exactly one of them."""
    if modulus_bits is not None:
        if bits is not None:
            raise ParameterError("Arguments 'bits' and 'modulus_bits' name the same modulus; pass 'bits' only.")
        warnings.warn(
            "Argument 'modulus_bits' is deprecated; pass 'bits' (the name RoundPlan and the config use).",
            DeprecationWarning,
            stacklevel=3,
        )
        bits = modulus_bits
    if bits is None:
        raise ParameterError("Argument 'bits' is required: the modulus q = 2^bits of the inputs and the sum.")
    return check_bits(bits, "bits")


def _silences(members: frozenset[int], dropouts: Mapping[str, set[int]] | None) -> dict[int, str]:
    """``dropouts`` (stage -> clients silent from it on) as client -> stage, checked against ``members``."""
    silent_from: dict[int, str] = {}
    for stage, gone in dict(dropouts or {}).items():
        if stage not in STAGE_NAMES:
            raise ParameterError(f"Argument 'dropouts' has unknown stage {stage!r}; expected one of {STAGES}.")
        for cid in gone:
            if cid not in members:
                raise ParameterError(f"Argument 'dropouts[{stage!r}]' names client {cid!r}, which has no input.")
            if cid in silent_from:
                raise ParameterError(
                    f"Argument 'dropouts' lists client {cid} under both {silent_from[cid]!r} and {stage!r}; "
                    "a client stops responding from one stage on, so list it once (the earliest stage)."
                )
            silent_from[cid] = stage
    return silent_from


def round_plan(
    ids: Sequence[int],
    dim: int,
    *,
    bits: int,
    threshold: int,
    dropouts: Mapping[str, set[int]] | None = None,
    neighbours: int | None = None,
    security: str = "active",
    seed: int | None = None,
    round_id: bytes | None = None,
    min_roster: int | None = None,
    noise: NoiseSpec | None = None,
) -> RoundPlan:
    """The checked :class:`~protocols.pool.RoundPlan` of a round of the clients ``ids`` with vectors of length
    ``dim`` (the one configuration the pool's clients and the server are built from; the parameters are those
    of :func:`run_secagg_round`). ``neighbours >= len(ids) - 1`` is the full graph (and its thresholds): a client
    configured with a degree refuses to treat a roster as a full graph itself. ``round_id=None``: drawn from
    ``os.urandom``; ``min_roster=None``: every client not silent from ``"advertise_keys"`` (``dropouts``), what an
    honest server admits. Raises :class:`~secagg_dp.errors.ParameterError` naming the bad argument."""
    bits = check_bits(bits, "bits")
    dim = check_int("dim", dim, lo=1, strict=True)
    members = frozenset(check_int("ids", c, lo=0, hi=m.MAX_CLIENT_ID, strict=True) for c in ids)
    n = len(members)
    security = check_security(security)
    if neighbours is None and n > shamir.MAX_HOLDERS:
        raise ParameterError(
            f"Argument 'inputs' may hold at most {shamir.MAX_HOLDERS} clients on the full graph, not {n}. "
            "To fix, use SecAgg+ (neighbours=k), whose evaluation points are local to a neighbourhood."
        )
    t = check_int("threshold", threshold, lo=2, hi=max(2, n), strict=True)
    if n < 2:
        raise ParameterError("Argument 'inputs' must hold at least 2 clients.")
    if neighbours is not None:
        neighbours = check_int("neighbours", neighbours, lo=2, hi=shamir.MAX_HOLDERS - 1, strict=True)
        if neighbours >= n - 1:
            neighbours = None  # the caller's own choice: every client then expects the full graph
    if neighbours is not None:
        if t > min(neighbours, n - 1) + 1:
            raise ParameterError(
                f"Argument 'threshold' must be <= neighbours + 1 = {min(neighbours, n - 1) + 1}, not {t}. "
                "To fix, raise 'neighbours' or lower 'threshold' (see secaggplus_parameters)."
            )
    k = n - 1 if neighbours is None else min(neighbours, n - 1)  # the full graph is degree n - 1
    full = k >= n - 1
    holders = n if full else k + 1
    need = min_threshold(holders, neighbours=None if full else k, security=security)
    if t < need:
        rule = "floor(2n/3) + 1" if full else "floor((k + 1)/2) + 1"
        raise ParameterError(
            f"Argument 'threshold' must be >= {need} ({rule}) in {security} mode with {holders} share holders per "
            f"secret, not {t}: a server that sends inconsistent survivor lists needs only 2t - {holders} "
            "colluders. To fix, raise 'threshold' (see secaggplus_parameters), or pass security='semi-honest' "
            "for a trusted server."
        )
    if round_id is not None and (not isinstance(round_id, bytes) or len(round_id) != m.ROUND_ID_LEN):
        raise ParameterError(f"Argument 'round_id' must be {m.ROUND_ID_LEN} bytes, not {round_id!r}.")
    silent_from = _silences(members, dropouts)
    if min_roster is None:
        min_roster = max(2, n - sum(1 for s in silent_from.values() if s == "advertise_keys"))
    min_roster = check_int("min_roster", min_roster, lo=2, hi=n, strict=True)
    if round_id is None:
        round_id = os.urandom(m.ROUND_ID_LEN)
    if seed is not None:
        seed = check_int("seed", seed, lo=0, hi=(1 << 256) - 1, strict=True)
    return RoundPlan(
        bits=bits,
        dim=dim,
        threshold=t,
        neighbours=neighbours,
        security=security,
        round_id=round_id,
        seed=seed,
        min_roster=min_roster,
        clients=n,
        noise=noise,
    )


def run_plan(
    pool: ClientPool,
    ids: Sequence[int],
    plan: RoundPlan,
    *,
    dropouts: Mapping[str, set[int]] | None = None,
    faults: FaultInjector | None = None,
) -> SecAggResult:
    """Run one round of ``plan`` with the clients ``ids`` in ``pool`` (which holds their inputs, vectors of
    length ``plan.dim``): the plan is checked again for these clients (:func:`round_plan`, so a hand-made plan
    meets the same rules), handed to the pool (identities, clients) and the server's fields taken from it; the
    server and the transport (with ``faults``, if given) run here. ``dropouts`` maps a stage to the clients
    silent from it on. A seeded plan (``plan.seed``) derives every key, nonce and the delivery order from
    (seed, round id): every pool then gives the same result as :class:`~protocols.pool.InProcessClientPool`."""
    # every field of the plan is a round_plan argument of the same name, but 'clients' (len(ids) here)
    settings = {f.name: getattr(plan, f.name) for f in fields(plan) if f.name != "clients"}
    plan = round_plan(ids, dropouts=dropouts, **settings)
    members = frozenset(int(c) for c in ids)
    silent_from = _silences(members, dropouts)
    rng = None if plan.seed is None else np.random.default_rng(plan.seed)
    registry = None
    if plan.security == "active":
        keys = pool.identities(plan)
        if set(keys) != members:
            raise ProtocolError("the client pool returned identity keys for other clients than the round's")
        registry = KeyRegistry(keys)
    server = SecAggServer(
        bits=plan.bits,
        dim=plan.dim,
        threshold=plan.threshold,
        neighbours=plan.neighbours,
        security=plan.security,
        registry=registry,
        round_id=plan.round_id,
        source=plan.server_source(),
        noise=plan.noise,
    )
    pool.start(plan, registry, silent_from)
    return drive_round(server, pool, InProcessTransport(rng=rng, faults=faults, keep_log=False))


def run_pooled_round(
    pool: ClientPool,
    ids: Sequence[int],
    dim: int,
    *,
    bits: int | None = None,
    threshold: int,
    dropouts: Mapping[str, set[int]] | None = None,
    neighbours: int | None = None,
    security: str = "active",
    seed: int | None = None,
    round_id: bytes | None = None,
    faults: FaultInjector | None = None,
    min_roster: int | None = None,
    noise: NoiseSpec | None = None,
    modulus_bits: int | None = None,
) -> SecAggResult:
    """:func:`run_secagg_round` with the clients in ``pool`` (which holds the inputs of the clients ``ids``,
    vectors of length ``dim``); the server and the transport (with ``faults``, if given) run here. Same
    checks, same seeded derivations: for the same seed and round id every pool gives the same result as
    :class:`~protocols.pool.InProcessClientPool`. ``neighbours >= len(ids) - 1`` runs the full graph (and
    its thresholds): a client configured with a degree refuses to treat a roster as a full graph itself.
    ``modulus_bits``: the deprecated name of ``bits``. :func:`round_plan` then :func:`run_plan`.
    """
    plan = round_plan(
        ids,
        dim,
        bits=_bits(bits, modulus_bits),
        threshold=threshold,
        dropouts=dropouts,
        neighbours=neighbours,
        security=security,
        seed=seed,
        round_id=round_id,
        min_roster=min_roster,
        noise=noise,
    )
    return run_plan(pool, ids, plan, dropouts=dropouts, faults=faults)
