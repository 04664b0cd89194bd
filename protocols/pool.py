"""Where the clients of a round live: :func:`~protocols.round.drive_round` talks to a client pool.

Per stage the driver hands the pool the downlink envelopes in delivery order; the pool gives each to its
addressee (a broadcast to every client, in ascending id order), skips clients that went silent, and returns
the replies in that same global order together with the clients' refusal reports. :class:`InProcessClientPool`
runs the clients in this process. A pool that spreads clients over several places (``simulations`` has one on
Dask) runs :func:`serve` on each part with the envelopes' global positions and combines the parts with
:func:`merge`, which restores the sequential order, so the seeded transport shuffles the uplink identically.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np

from protocols import messages as m
from protocols.client import SecAggClient, release_caches
from protocols.pki import KeyRegistry, create_identities
from protocols.security import DEFAULT_MAX_CLIENTS, ClientPolicy
from protocols.stages import STAGE_NAMES
from protocols.transport import Envelope
from secagg_dp._validate import check_int
from secagg_dp.crypto import kdf, signing
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import ParameterError, ProtocolError
from secagg_dp.noise.add_then_remove import NoiseSpec

__all__ = [
    "RoundPlan",
    "ClientPool",
    "InProcessClientPool",
    "LazyInputs",
    "Reply",
    "serve",
    "merge",
    "seeded_sources",
    "simulated_noise_master",
]

_ORDER = {s: i for i, s in enumerate(STAGE_NAMES)}

#: One client's answer to one downlink envelope: (position of the envelope in the stage's delivery order,
#: client id, reply bytes, or the text of the client's refusal).
Reply = tuple[int, int, bytes | str]


def seeded_sources(
    seed: int, round_id: bytes | None = None
) -> tuple[bytes, Callable[[int], SeededRandom], SeededRandom, Callable[[int], SeededRandom]]:
    """Deterministic randomness for a seeded simulation: per-round sources keyed by (seed, round id), and
    long-term identity sources keyed by (seed, client id). ``round_id=None`` derives the round id from the
    seed too. Returns ``(round_id, client_source, server_source, identity_source)``."""
    if round_id is None:
        round_id = kdf.derive(_simulation_ikm(seed), info=kdf.LABEL_SIM_ROUND, length=m.ROUND_ID_LEN)
    rid = round_id

    def client_source(cid: int) -> SeededRandom:
        return _seeded(seed, kdf.LABEL_SIM_CLIENT, rid, cid)

    def identity_source(cid: int) -> SeededRandom:
        return _seeded(seed, kdf.LABEL_SIM_IDENTITY, b"", cid)

    return round_id, client_source, _seeded(seed, kdf.LABEL_SIM_SERVER, round_id), identity_source


@functools.lru_cache(maxsize=16)
def _simulation_ikm(seed: int) -> bytes:
    """The HKDF input key of a seeded simulation (a pure function of the seed, remembered: the pool asks for
    two sources per client)."""
    return hashlib.sha256(b"secagg-dp/v1/simulation-seed" + seed.to_bytes(32, "big")).digest()


def _seeded(seed: int, label: bytes, round_id: bytes, *ids: int) -> SeededRandom:
    """A fresh source keyed by HKDF(seed's key, label || round id || ids)."""
    return SeededRandom(kdf.derive(_simulation_ikm(seed), info=kdf.context(label, round_id, *ids)))


def simulated_noise_master(seed: int, round_id: bytes, cid: int) -> bytes:
    """Client ``cid``'s add-then-remove master seed in a seeded simulation: HKDF of (seed, round id, client id),
    so the ideal aggregator can apply exactly the noise the protocol's clients add (simulation only: a deployed
    client draws its master seed from ``os.urandom``)."""
    return kdf.derive(_simulation_ikm(seed), info=kdf.context(kdf.LABEL_SIM_NOISE_MASTER, round_id, cid))


@dataclass(frozen=True)
class RoundPlan:
    """What every client of one round is configured with, apart from its input and identity key.

    ``clients``: how many clients are invited (each client refuses a larger roster, by size, before parsing).
    ``seed=None``: keys and nonces from ``os.urandom``; an int seed derives each client's randomness from
    (seed, round id, client id) and its identity key from (seed, client id), so a client behaves the same
    wherever it is constructed (simulation only: the seed unmasks everyone). ``min_roster``: the smallest
    roster the clients accept (:class:`~protocols.security.ClientPolicy`).
    """

    bits: int
    dim: int
    threshold: int
    neighbours: int | None
    security: str
    round_id: bytes
    seed: int | None = None
    min_roster: int | None = None
    clients: int = DEFAULT_MAX_CLIENTS
    noise: NoiseSpec | None = None  # add-then-remove noise the clients add and the server removes

    @property
    def policy(self) -> ClientPolicy:
        """The policy each client enforces (its own minimum threshold, graph degree, mode and roster size, and
        the population it expects: ``clients``, the number invited to the round)."""
        return ClientPolicy(
            security=self.security,
            min_threshold=self.threshold,
            neighbours=self.neighbours,
            min_roster=self.min_roster,
            max_clients=max(2, self.clients),
        )

    def client_source(self, cid: int) -> SeededRandom | None:
        """Client ``cid``'s per-round randomness (None: os.urandom)."""
        return None if self.seed is None else _seeded(self.seed, kdf.LABEL_SIM_CLIENT, self.round_id, cid)

    def noise_master(self, cid: int) -> bytes | None:
        """Client ``cid``'s add-then-remove master seed: None (drawn by the client from its source) unless the
        round is seeded (:func:`simulated_noise_master`) and has noise."""
        if self.noise is None or self.seed is None:
            return None
        return simulated_noise_master(self.seed, self.round_id, cid)

    def identity_source(self, cid: int) -> SeededRandom | None:
        """Where client ``cid``'s long-term identity key comes from (None: os.urandom)."""
        return None if self.seed is None else _seeded(self.seed, kdf.LABEL_SIM_IDENTITY, b"", cid)

    def server_source(self) -> SeededRandom | None:
        """The server's randomness for this round (None: os.urandom)."""
        return None if self.seed is None else _seeded(self.seed, kdf.LABEL_SIM_SERVER, self.round_id)


@dataclass(frozen=True)
class LazyInputs:
    """The inputs of a round's clients, made one client at a time: ``make(cid)`` returns client ``cid``'s
    uint64 vector when the pool builds that client, so no n x d array is ever held. ``ids`` (any iterable of
    ints) is stored sorted and without repeats. A pool calls ``make`` at most once per client, in ascending id
    order, where the client lives: :class:`InProcessClientPool` in this process,
    :class:`~protocols.procpool.ProcessClientPool` in each forked worker for its own shard only (forked, so
    ``make`` need not pickle). ``dim``, the vectors' length, is optional for a pool and required by
    :func:`~protocols.round.run_secagg_round`, which checks every vector against it when it is made."""

    ids: tuple[int, ...]
    make: Callable[[int], np.ndarray]
    dim: int | None = None

    def __post_init__(self) -> None:
        if not callable(self.make):
            raise ParameterError(f"Argument 'make' must be a callable id -> uint64 vector, not {self.make!r}.")
        if self.dim is not None:  # a length is an integer type (7.0 refused), kept as an int
            object.__setattr__(self, "dim", check_int("dim", self.dim, lo=1, strict=True))
        try:
            ids = tuple(sorted({int(c) for c in self.ids}))
        except (TypeError, ValueError):
            raise ParameterError(f"Argument 'ids' must be client ids (ints), not {self.ids!r}.") from None
        if not ids:
            raise ParameterError("Argument 'ids' must name at least one client.")
        object.__setattr__(self, "ids", ids)

    def __len__(self) -> int:
        return len(self.ids)


class ClientPool(Protocol):
    """The clients of one round, wherever they run. Called in this order: ``identities`` (active mode only),
    ``start``, then ``deliver`` once per stage."""

    def identities(self, plan: RoundPlan) -> Mapping[int, bytes]:
        """Create the clients' Ed25519 identities where the clients live; return the public keys by id."""
        ...

    def start(self, plan: RoundPlan, registry: KeyRegistry | None, silent_from: Mapping[int, str]) -> None:
        """Construct the clients; ``silent_from[c] = stage``: client c stops responding from that stage on."""
        ...

    def deliver(self, stage: str, envelopes: Sequence[Envelope]) -> tuple[list[Envelope], list[str]]:
        """Hand each downlink envelope to its addressee(s); the uplink envelopes and refusal reports, in order."""
        ...


def serve(
    clients: Mapping[int, SecAggClient],
    silent_from: Mapping[int, str],
    stage: str,
    envelopes: Iterable[tuple[int, Envelope]],
) -> list[Reply]:
    """Run ``clients`` on the (position, envelope) pairs in order: a broadcast goes to every client in
    ascending id order, an envelope for an unknown id is skipped, and so is a client silent at ``stage``."""
    out: list[Reply] = []
    ids = sorted(clients)
    now = _ORDER[stage]
    for pos, env in envelopes:
        for cid in ids if env.recipient == m.BROADCAST else [env.recipient]:
            client = clients.get(cid)
            if client is None or (cid in silent_from and _ORDER[silent_from[cid]] <= now):
                continue
            try:
                reply = client.receive(env.payload)
            except ProtocolError as e:
                out.append((pos, cid, f"{stage}: client {cid} refused a message: {e}"))
                continue
            if reply is not None:
                out.append((pos, cid, reply))
    return out


def after_stage(stage: str) -> None:
    """What a process holding clients lets go of once they have all served ``stage``: after share_keys the
    parsed roster keys (n k of them at most, O(n) kept); after unmasking, when every client has let go of its
    state, the heap's free pages (:func:`_trim_heap`)."""
    if stage == "share_keys":
        release_caches()
    elif stage == "unmasking":
        _trim_heap()


def own_identities(parts: Sequence[Mapping[int, bytes]], owner: Mapping[int, int]) -> dict[int, bytes]:
    """The identity keys of every shard's clients, ``parts[s]`` from the worker holding shard ``s``; ``owner``
    maps each client id to its shard. A worker may register keys only for its own shard's clients: a key for
    any other client raises :class:`ProtocolError`."""
    keys: dict[int, bytes] = {}
    for s, part in enumerate(parts):
        foreign = sorted(c for c in part if owner.get(c) != s)
        if foreign:
            raise ProtocolError(f"shard {s} returned identity keys for clients outside it: {foreign[:5]}")
        keys.update(part)
    return keys


def shard_silences(silent_from: Mapping[int, str], owner: Mapping[int, int], shards: int) -> list[dict[int, str]]:
    """``silent_from`` split by shard (``owner`` maps each client id to its shard); clients in no shard are
    left out."""
    silent: list[dict[int, str]] = [{} for _ in range(shards)]
    for c, st in silent_from.items():
        if c in owner:
            silent[owner[c]][c] = st
    return silent


def own_replies(
    stage: str,
    shard: int,
    sent: Mapping[int, int],
    owner: Mapping[int, int],
    replies: Any,
    refused: list[str],
) -> list[Reply]:
    """The replies a worker holding ``shard`` may give: one per (envelope it was sent, client of its own that the
    envelope addresses), at most once each. ``sent`` maps each envelope's position to its recipient,
    ``owner`` each client id to its shard. Anything else (a reply in another shard's client's name, for an
    envelope the shard was not sent, malformed or repeated) is appended to ``refused`` as a report and never
    merged: a worker speaks only for its own clients."""
    seen: set[tuple[int, int]] = set()
    out: list[Reply] = []
    for r in replies if isinstance(replies, list) else [replies]:
        ok = isinstance(r, tuple) and len(r) == 3 and all(type(x) is int for x in r[:2])
        ok = ok and isinstance(r[2], (bytes, str))
        if ok:
            pos, cid, _ = r
            to = sent.get(pos)
            ok = owner.get(cid) == shard and to is not None and to in (m.BROADCAST, cid) and (pos, cid) not in seen
        if not ok:
            who = r[1] if isinstance(r, tuple) and len(r) == 3 else "?"
            refused.append(f"{stage}: shard {shard} sent a reply for client {who} that it may not give; refused")
            continue
        seen.add((pos, cid))
        out.append(r)
    return out


_malloc_trim: Callable[[int], int] | None = None


def _trim_heap() -> None:
    """Hand the heap's free pages back to the system (glibc ``malloc_trim``; nothing elsewhere). After the
    unmasking stage an in-process pool's clients have let go of their boxes and keys (about 10 kB each,
    scattered through the heap); the server's share tables and reconstruction then need fresh pages, which
    glibc maps anew rather than reusing those holes, so without this the peak RSS carries both."""
    global _malloc_trim
    if _malloc_trim is None:
        trim: Callable[[int], int] = lambda pad: 0  # noqa: E731 (no glibc: nothing to do)
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL("libc.so.6").malloc_trim
                fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
                trim = fn
            except (OSError, AttributeError):
                pass
        _malloc_trim = trim
    _malloc_trim(0)


def _drain(envelopes: Sequence[Envelope]) -> Iterator[tuple[int, Envelope]]:
    """(position, envelope) pairs; for a list, each entry is replaced by None as it is handed out."""
    if not isinstance(envelopes, list):
        yield from enumerate(envelopes)
        return
    slots = cast("list[Envelope | None]", envelopes)
    for pos in range(len(slots)):
        env, slots[pos] = slots[pos], None
        if env is not None:  # always (each entry is handed out once)
            yield pos, env


def merge(parts: Iterable[list[Reply]]) -> tuple[list[Envelope], list[str]]:
    """Combine the replies of disjoint sets of clients into the order one sequential :func:`serve` gives
    (by envelope position, then client id): the uplink envelopes and the refusal reports."""
    uplink: list[Envelope] = []
    reports: list[str] = []
    for _, cid, r in sorted((x for part in parts for x in part), key=lambda x: (x[0], x[1])):
        if isinstance(r, str):
            reports.append(r)
        else:
            uplink.append(Envelope(cid, m.SERVER, r))
    return uplink, reports


class InProcessClientPool:
    """Every client in this process, handled one after another (the reference order).

    Built from the clients' ``inputs`` (id -> uint64 vector; the pool creates identities and clients), from
    a function making each client's input when its client is built (:meth:`lazy`, or :meth:`of_inputs` with
    :class:`LazyInputs`: no n x d array), or from
    ready-made clients with :meth:`of_clients`. A client keeps its input bit-packed, so the pool holds
    n d bits / 8 bytes of inputs once the clients are built.
    """

    def __init__(self, inputs: Mapping[int, np.ndarray]) -> None:
        if not isinstance(inputs, Mapping) or not inputs:
            raise ParameterError("Argument 'inputs' must be a non-empty dict {client id: uint64 vector}.")
        own = dict(inputs)
        self._setup(sorted(own), own.pop)  # each vector is let go once its client holds a packed copy

    def _setup(self, ids: Sequence[int], make: Callable[[int], np.ndarray] | None) -> None:
        self._ids: list[int] = list(ids)
        self._make = make
        self._identities: dict[int, signing.SigningKey] = {}
        self.clients: dict[int, SecAggClient] = {}
        self.silent_from: dict[int, str] = {}

    @classmethod
    def lazy(cls, ids: Iterable[int], make: Callable[[int], np.ndarray]) -> InProcessClientPool:
        """A pool of the clients ``ids`` whose inputs are made by ``make(id)`` one client at a time in
        :meth:`start`, in ascending id order (each vector lives only until its client has packed it); see
        :class:`LazyInputs`."""
        return cls.of_inputs(LazyInputs(tuple(ids), make))

    @classmethod
    def of_inputs(cls, inputs: Mapping[int, np.ndarray] | LazyInputs) -> InProcessClientPool:
        """A pool of the clients of ``inputs``: a dict id -> uint64 vector, or :class:`LazyInputs`."""
        if not isinstance(inputs, LazyInputs):
            return cls(inputs)
        pool = cls.__new__(cls)
        pool._setup(inputs.ids, inputs.make)
        return pool

    @classmethod
    def of_clients(
        cls, clients: Mapping[int, SecAggClient], silent_from: Mapping[int, str] | None = None
    ) -> InProcessClientPool:
        """A pool of already constructed clients (``identities`` and ``start`` are then not needed)."""
        pool = cls.__new__(cls)
        pool._setup(sorted(clients), None)
        pool.clients, pool.silent_from = dict(clients), dict(silent_from or {})
        return pool

    def identities(self, plan: RoundPlan) -> dict[int, bytes]:
        """Create an identity per client (seeded from ``plan`` if it has a seed); the public keys."""
        registry, self._identities = create_identities(self._ids, plan.identity_source)
        return dict(registry.keys)

    def start(self, plan: RoundPlan, registry: KeyRegistry | None, silent_from: Mapping[int, str]) -> None:
        """Construct the clients (in ascending id order) with ``registry`` and the round's policy."""
        if plan.security == "active" and not self._identities:
            raise ProtocolError("InProcessClientPool.start: call identities() first in active mode")
        if self._make is None:
            raise ProtocolError("InProcessClientPool.start: the clients were already built")
        policy, make = plan.policy, self._make
        members = set(self._ids)
        self.silent_from = {c: s for c, s in silent_from.items() if c in members}
        self.clients = {}
        for cid in self._ids:
            self.clients[cid] = SecAggClient(
                cid,
                make(cid),
                bits=plan.bits,
                policy=policy,
                identity=self._identities.get(cid),
                registry=registry,
                source=plan.client_source(cid),
                noise=plan.noise,
                noise_master=plan.noise_master(cid),
            )
        self._make = None  # each client holds its own (packed) copy

    def deliver(self, stage: str, envelopes: Sequence[Envelope]) -> tuple[list[Envelope], list[str]]:
        """Every envelope to its client(s), one after another; replies and refusal reports in that order.
        A list of envelopes is consumed: each entry is cleared once its client has it, so a stage's downlink
        (e.g. n roster slices) is let go message by message while the replies accumulate."""
        out = merge([serve(self.clients, self.silent_from, stage, _drain(envelopes))])
        after_stage(stage)
        return out

    def close(self) -> None:
        """Nothing to stop (the clients live in this process); here so that any pool that
        :func:`~protocols.procpool.client_pool` returns closes the same way, e.g. in a ``with`` block."""

    def __enter__(self) -> InProcessClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
