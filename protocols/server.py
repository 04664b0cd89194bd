"""The server role (Bonawitz et al. 2017, Fig. 4; Sec. 6 in ``"active"`` mode) as a state machine.

The server never selects or indexes clients: it opens a round, and the clients that check in (with their
own coins) form U1. It then collects ShareKeys (U2), masked inputs (U3) and unmasking responses (U4),
advancing at each deadline (:meth:`advance`); in active mode a consistency round (survivor-set signatures,
U4) sits between the masked inputs and the unmasking. It aborts, reconstructing nothing, as soon as fewer
than ``threshold`` clients remain or some needed secret has fewer than ``threshold`` shares.

Every received message is checked before it is parsed: the stage accepts its kind, the authenticated
channel sender (``receive(data, sender=...)``, supplied by the transport) is expected in this stage and
has not sent yet, and the declared size is within the cap computed from the round's parameters. After
parsing, the message's own sender field must equal the channel sender.

Departure from the paper (on purpose): reconstructed secrets are verified before use (sk_v against the
advertised public key, b_u against a SHA-256 commitment sent with ShareKeys), and a bad share is dropped
and another t-subset tried, so a corrupted share cannot silently corrupt the sum.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from functools import partial
from typing import overload

import numpy as np

from protocols import messages as m
from protocols import wire
from protocols.enforcement import ServerEnforcement, asked_group, box_tail, check_commitment, check_noise_owners
from protocols.graph import RosterGraph, holder_points, roster_graph, roster_graph_seed, two_hop_positions
from protocols.pki import KeyRegistry
from protocols.security import check_security, min_threshold
from protocols.stages import SERVER_ACCEPTS, SERVER_ADVANCE, ServerStage
from protocols.statements import consistency_statement, roster_statement, verify_keys, verify_survivor_set
from secagg_dp._validate import check_int, check_probability
from secagg_dp.crypto import aead, masking, merkle, shamir
from secagg_dp.crypto.keys import is_low_order, keypair_from_private
from secagg_dp.crypto.prg import accumulate_mask
from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AbortError, AuthenticationError, ParameterError, ProtocolError
from secagg_dp.noise import add_then_remove as atr
from secagg_dp.zq import check_bits

__all__ = ["SecAggServer", "RoundOutcome", "survivor_lists", "SurvivorLists", "DeferredOutgoing"]

Outgoing = list[tuple[int, bytes]]  # (recipient or BROADCAST, serialised message)


class DeferredOutgoing(Sequence[tuple[int, bytes]]):
    """A stage's per-client messages, each serialised only when read: entry i is
    ``(recipients[i], build(i))``. What :meth:`SecAggServer.advance_deferred` returns for the stages whose
    downlink is one message per client (roster slices, survivor lists, unmask requests), so a driver can hand
    them over one at a time instead of holding all n at once (about 12 kB each at n = 10^4 for the roster
    slices). ``build`` depends only on state fixed when the stage closed, so every read gives the same bytes
    whatever the order."""

    def __init__(self, recipients: Sequence[int], build: Callable[[int], bytes]) -> None:
        self.recipients: tuple[int, ...] = tuple(recipients)
        self.build = build

    def __len__(self) -> int:
        return len(self.recipients)

    @overload
    def __getitem__(self, i: int) -> tuple[int, bytes]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[int, bytes]]: ...
    def __getitem__(self, i: int | slice) -> tuple[int, bytes] | list[tuple[int, bytes]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self.recipients[i], self.build(i)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        for i in range(len(self)):
            yield self[i]


_Deferrable = Outgoing | DeferredOutgoing
_Verify = Callable[[int, bytes], bool]  # (owner, reconstructed secret) -> whether it is the committed one
_HEAD = 28
_BOX_LEN = aead.OVERHEAD + m.SharePlaintext.LEN
_SHARE_ROW = 4 * shamir.PIECES_PER_32_BYTES


@dataclass(frozen=True)
class _Shared:
    """A checked ShareKeys as the server keeps it until the boxes are forwarded: the commitment, the
    recipients and the received bytes with each box's span in them. Boxes are cut out only when the
    bundles are built, so the server holds no second copy of the O(n k) boxes next to the received
    messages."""

    commitment: bytes
    recipients: np.ndarray  # int64, in message order (an array: a tuple of k int objects costs ~1.2 kB)
    data: bytes = field(repr=False)
    spans: np.ndarray = field(repr=False)  # (boxes, 2) int32: start and end of each box in ``data``

    @classmethod
    def of(cls, msg: m.ShareKeys, data: bytes) -> _Shared:
        """Record ``msg``, parsed from exactly ``data`` (header, commitment, count, then (id, length, box))."""
        lengths = np.fromiter(map(len, msg.boxes), dtype=np.int64, count=len(msg.boxes))
        ends = m.HEADER_LEN + 32 + 4 + np.cumsum(lengths + 8)
        tail = len(msg.noise_commitment)  # add-then-remove: the noise commitment follows the boxes
        if (ends[-1] if ends.size else m.HEADER_LEN + 36) + tail != len(data):  # guards the layout assumption
            raise ProtocolError("ShareKeys layout does not match its bytes")
        spans = np.stack([ends - lengths, ends], axis=1).astype(np.int32)  # a message is < 2 GiB
        return cls(msg.commitment, np.asarray(msg.recipients, dtype=np.int64).reshape(-1), bytes(data), spans)

    def boxes(self) -> list[bytes]:
        return [self.data[a:b] for a, b in self.spans.tolist()]

    def box(self, j: int) -> bytes:
        """The j-th box (addressed to ``recipients[j]``)."""
        a, b = self.spans[j].tolist()
        return self.data[a:b]


class SurvivorLists:
    """The consistency round's commitment to one survivor set U3 on one roster graph: the bitmap of U3 over
    ring positions as the leaves of a Merkle sum tree, 256 positions per leaf
    (:func:`protocols.messages.survivor_chunks`, :func:`protocols.messages.survivor_leaf`), whose root
    carries |U3|, and the
    :class:`~protocols.messages.SurvivorList` each client gets (:meth:`message`)."""

    def __init__(self, round_id: bytes, graph: RosterGraph, survivors: frozenset[int] | set[int]) -> None:
        self.round_id, self.graph = round_id, graph
        bits = np.zeros(graph.n, dtype=bool)
        if survivors:
            bits[graph.ring_pos[graph.index(np.fromiter(survivors, dtype=np.int64, count=len(survivors)))]] = True
        self.chunks = m.survivor_chunks(bits)
        self.tree = merkle.MerkleSumTree([m.survivor_leaf(c) for c in self.chunks])
        self.root, self.count = self.tree.root, self.tree.count  # the count is |U3|: the bitmap's popcount

    def message(self, u: int) -> m.SurvivorList:
        """The list for client ``u``: SecAgg+, the leaves covering its two-hop positions, their multiproof
        (sibling counts and hashes) and the ids at those positions; full graph, every leaf."""
        graph = self.graph
        if graph.full:
            every = tuple(range(self.chunks.shape[0]))
            return m.SurvivorList(self.round_id, m.SERVER, u, self.count, self.root, every, self.chunks.copy())
        pos = two_hop_positions(graph, int(graph.ring_pos[graph.index([u])[0]]))
        at = np.unique(pos // 256)
        proof = self.tree.multiproof(at.tolist())
        return m.SurvivorList(
            self.round_id,
            m.SERVER,
            u,
            self.count,
            self.root,
            tuple(at.tolist()),
            self.chunks[at],
            np.frombuffer(b"".join(h for _, h in proof), dtype=np.uint8).reshape(-1, m.HASH_LEN).copy(),
            np.sort(graph.order[pos]),
            tuple(c for c, _ in proof),
        )


def survivor_lists(round_id: bytes, graph: RosterGraph, survivors: frozenset[int] | set[int]) -> SurvivorLists:
    """The commitment to ``survivors`` on ``graph`` and each client's survivor list (:class:`SurvivorLists`)."""
    return SurvivorLists(round_id, graph, survivors)


class _HolderSets(Mapping[int, frozenset[int]]):
    """Client -> its share holders (its neighbours and itself), made on access from the graph's rows: one
    (n, k + 1) int array instead of n frozensets of k + 1 ids (about 2 kB each at k = 32)."""

    def __init__(self, graph: RosterGraph) -> None:
        self._graph = graph
        self.rows = np.concatenate([graph.ids[:, None], graph.rows(graph.ids)], axis=1)

    def __getitem__(self, u: int) -> frozenset[int]:
        try:
            i = int(self._graph.index([u])[0])
        except ParameterError:
            raise KeyError(u) from None
        return frozenset(self.rows[i].tolist())

    def __iter__(self) -> Iterator[int]:
        return iter(self._graph.ids.tolist())

    def __len__(self) -> int:
        return self._graph.n


class _HolderPoints(Mapping[int, dict[int, int]]):
    """Owner -> its holders' Shamir points (:func:`~protocols.graph.holder_points`), computed on access
    from the holder sets instead of stored for all n owners."""

    def __init__(self, holders: Mapping[int, frozenset[int]]) -> None:
        self._holders = holders

    def __getitem__(self, owner: int) -> dict[int, int]:
        return holder_points(sorted(self._holders[owner]))

    def __iter__(self) -> Iterator[int]:
        return iter(self._holders)

    def __len__(self) -> int:
        return len(self._holders)


class _ShareRows:
    """Shares of one kind as they arrive: owner, responder and row appended to preallocated arrays (grown by
    doubling if a bound was short), so a parsed UnmaskResponse is let go as soon as it is checked."""

    def __init__(self, capacity: int, width: int) -> None:
        self.size = 0
        self.owners = np.zeros(capacity, dtype=np.int64)
        self.holders = np.zeros(capacity, dtype=np.int64)
        self.rows = np.zeros((capacity, width), dtype=np.uint32)

    def add(self, owners: tuple[int, ...], holder: int, rows: np.ndarray) -> None:
        a, b = self.size, self.size + len(owners)
        if b > self.owners.size:
            cap = max(b, 2 * self.owners.size)
            for name in ("owners", "holders", "rows"):
                old = getattr(self, name)
                new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
                new[:a] = old[:a]
                setattr(self, name, new)
        self.owners[a:b] = owners
        self.holders[a:b] = holder
        self.rows[a:b] = rows
        self.size = b


class _ShareTable:
    """Received Shamir shares of one kind, sorted by (owner, evaluation point): flat arrays of owners,
    points and share rows, and each owner's span. O(shares) numbers and no per-share Python objects (the
    previous per-owner lists of (point, row) tuples cost about 0.2 kB per share)."""

    def __init__(self, owners: np.ndarray, points: np.ndarray, rows: np.ndarray) -> None:
        order = np.lexsort((points, owners))
        self.points, self.rows, self.order = points[order], rows, order  # rows stay as received: no second copy
        sorted_owners = owners[order]
        uniq, first, counts = np.unique(sorted_owners, return_index=True, return_counts=True)
        self._span: dict[int, tuple[int, int]] = dict(
            zip(uniq.tolist(), zip(first.tolist(), counts.tolist(), strict=True), strict=True)
        )

    def span(self, owner: int) -> tuple[int, int]:
        """(first row, number of shares) of ``owner``; (0, 0) if none arrived."""
        return self._span.get(owner, (0, 0))

    def count(self, owner: int) -> int:
        return self.span(owner)[1]

    def shares(self, owner: int) -> list[tuple[int, np.ndarray]]:
        """``owner``'s (point, row) pairs by increasing point."""
        a, c = self.span(owner)
        return list(zip(self.points[a : a + c].tolist(), self.rows[self.order[a : a + c]], strict=True))


@dataclass(frozen=True)
class RoundOutcome:
    """What the server learns: the sum of U3's inputs mod 2^bits, U3 itself, and who dropped after sharing."""

    aggregate: np.ndarray = field(repr=False)
    survivors: frozenset[int]
    dropped: frozenset[int]
    noise_removed: tuple[int, ...] = ()  # add-then-remove: the noise groups removed from every survivor

    def __post_init__(self) -> None:
        if self.survivors & self.dropped:
            raise ProtocolError("survivor and dropped sets must be disjoint")


class SecAggServer:
    """Aggregation server. ``neighbours=None``: full graph; an int k: SecAgg+ with k neighbours.

    ``security="active"`` (default) needs the ``registry`` of client identity keys and runs the consistency
    round; ``"semi-honest"`` is the trusted-server protocol without signatures. The full graph admits at
    most ``shamir.MAX_HOLDERS`` check-ins (one evaluation point each); SecAgg+ points are local to a
    neighbourhood, so only k + 1 <= ``shamir.MAX_HOLDERS`` is needed.

    ``round_id`` (16 bytes; ``None``: random) is the caller's label of the round; the round id on the wire,
    :attr:`round_id`, binds it to a fresh nonce drawn from ``source`` (:func:`protocols.wire.execution_round_id`),
    so every execution has its own round id even when the caller reuses a label. The label is kept as
    :attr:`label`.
    """

    def __init__(
        self,
        *,
        bits: int,
        dim: int,
        threshold: int,
        neighbours: int | None = None,
        p: float = 1.0,
        security: str = "active",
        registry: KeyRegistry | None = None,
        round_id: bytes | None = None,
        source: RandomSource | None = None,
        noise: atr.NoiseSpec | None = None,
    ) -> None:
        self.bits = check_bits(bits)
        # add-then-remove noise (docs/noise-enforcement.md), None without: remove the survivors' groups above
        # the dropout count
        self._enforce = ServerEnforcement.of(noise)
        self.noise = noise
        self.dim = check_int("dim", dim, lo=1, hi=(1 << 32) - 1)
        self.threshold = check_int("threshold", threshold, lo=2, hi=shamir.MAX_HOLDERS)
        self.k = None if neighbours is None else check_int("neighbours", neighbours, lo=2, hi=shamir.MAX_HOLDERS - 1)
        self.security = check_security(security)
        if self.security == "active" and not isinstance(registry, KeyRegistry):
            raise ParameterError(
                "Argument 'registry' must be a KeyRegistry of client identity keys in active mode. To fix, create "
                "one with protocols.pki.create_identities, or pass security='semi-honest' for a trusted server."
            )
        self.registry = registry
        self.max_clients = shamir.MAX_HOLDERS if self.k is None else m.MAX_CLIENT_ID + 1
        if self.k is not None and self.threshold > self.k + 1:
            raise ParameterError(
                f"Argument 'threshold' must be <= neighbours + 1 = {self.k + 1}, not {self.threshold}: "
                "each client has only k + 1 share holders."
            )
        self.p = check_probability("p", p)
        if round_id is None:
            round_id = os.urandom(m.ROUND_ID_LEN)
        if not isinstance(round_id, bytes) or len(round_id) != m.ROUND_ID_LEN:
            raise ParameterError(f"Argument 'round_id' must be {m.ROUND_ID_LEN} bytes.")
        self._src = resolve_source(source)
        # The caller's round id is a label; each execution's round id binds it to a fresh nonce from our source
        # (os.urandom, or a seeded source in simulation), so a label reused across executions never lets a
        # message of an earlier execution in (:func:`protocols.wire.execution_round_id`).
        self.label = round_id
        self.round_id = wire.execution_round_id(round_id, self._src.bytes(m.ROUND_ID_LEN))
        self.stage = ServerStage.IDLE
        self.reports: list[str] = []
        self.reconstructions = 0  # number of secrets reconstructed (0 after any abort)
        self.outcome: RoundOutcome | None = None
        self._keys: dict[int, tuple[bytes, bytes, bytes]] = {}  # enc_pk, mask_pk, signature
        self._shares: dict[int, _Shared] = {}
        self._commitments: dict[int, bytes] = {}
        self._masked: set[int] = set()  # U3 so far; their inputs live only in the running sum
        self._acc: np.ndarray | None = None
        self._sigs: dict[int, bytes] = {}
        self._responses: dict[int, tuple[int, ...]] = {}  # responder -> owners whose box failed to open
        self._share_rows: tuple[_ShareRows, ...] = ()  # b-shares, key shares, noise-seed shares as received
        self._u1: frozenset[int] = frozenset()
        self._u2: frozenset[int] = frozenset()
        self._u3: frozenset[int] = frozenset()
        self._holders: Mapping[int, frozenset[int]] = {}
        self._points: Mapping[int, dict[int, int]] = {}
        self._statement = b""
        self._signed_count = 0  # |U3| as committed in the consistency round (active mode)
        self._responders: frozenset[int] = frozenset()  # the clients sent an UnmaskRequest (see _request)

    @property
    def _noise_sched(self) -> atr.NoiseSchedule | None:
        """The add-then-remove schedule (None without enforcement or before the roster)."""
        return None if self._enforce is None else self._enforce.schedule

    def __repr__(self) -> str:
        return f"SecAggServer(stage={self.stage.name}, round_id={self.round_id.hex()})"

    # -- stage 0 -------------------------------------------------------------------------------------------
    def open_round(self) -> bytes:
        """Broadcast that round r is open; each client then decides with its own coin (probability p)."""
        if self.stage is not ServerStage.IDLE:
            raise ProtocolError(f"server in stage {self.stage.name} cannot open a round")
        msg = m.RoundOpen(
            self.round_id,
            m.SERVER,
            m.BROADCAST,
            self.p,
            self.bits,
            self.dim,
            self.threshold,
            self.k or 0,
            m.SECURITY_CODES[self.security],
        )
        self.stage = ServerStage.COLLECT_KEYS
        return msg.to_bytes()

    # -- receiving -----------------------------------------------------------------------------------------
    def receive(self, data: bytes, *, sender: int) -> None:
        """Validate and store one client message that arrived on ``sender``'s authenticated channel.

        Kind, sender and size are checked before any parsing; refusals raise ProtocolError and change nothing.
        """
        if isinstance(sender, bool) or not isinstance(sender, (int, np.integer)):
            raise TypeError(f"Argument 'sender' must be an int channel identity, not {type(sender).__name__}.")
        u = int(sender)
        kind = m.peek_kind(data)
        want = SERVER_ACCEPTS.get(self.stage)
        if kind is not want:
            raise ProtocolError(f"server in stage {self.stage.name} refuses a {kind.name} message")
        self._expect_sender(kind, u)
        cap = self._size_cap(kind, u)
        if len(data) > cap:
            raise ProtocolError(f"{kind.name} from client {u} has {len(data)} bytes, more than the cap {cap}")
        msg = m.decode(data)
        if msg.round_id != self.round_id:
            raise ProtocolError("message from another round (replay?)")
        if msg.recipient != m.SERVER:
            raise ProtocolError(f"message addressed to {msg.recipient}, not the server")
        if msg.sender != u:
            raise ProtocolError(f"message names sender {msg.sender} but arrived on client {u}'s channel (forgery?)")
        # Typed dispatch on the parsed class (its kind was checked against the stage above).
        match msg:
            case m.AdvertiseKeys():
                self._on_advertise(u, msg)
            case m.ShareKeys():
                if set(msg.recipients) != self._holders[u] - {u}:
                    raise ProtocolError(f"client {u} addressed shares to the wrong set of holders")
                check_commitment(self._enforce, u, msg.noise_commitment)
                self._shares[u] = _Shared.of(msg, data)
                if self._enforce is not None:
                    self._enforce.record_commitment(u, msg.noise_commitment)
            case m.MaskedInput():
                if msg.bits != self.bits or msg.y.size != self.dim:
                    raise ProtocolError(f"client {u} sent a masked input of the wrong shape or modulus")
                self._accumulate(u, msg.y)
            case m.SurvivorSignature():
                try:
                    verify_survivor_set(self._registry(), u, self._statement, msg.signature)
                except AuthenticationError:
                    raise ProtocolError(f"survivor-set signature of client {u} is invalid") from None
                self._sigs[u] = msg.signature
            case m.UnmaskResponse():
                alive, gone = self._request(u)
                owners_ok = set(msg.self_owners) <= alive and set(msg.key_owners) <= gone
                if not (owners_ok and set(msg.failed) <= alive | gone):
                    raise ProtocolError(f"client {u} sent shares for clients it was not asked about")
                check_noise_owners(self._enforce, u, msg.noise_owners)
                self._responses[u] = msg.failed
                b_rows, key_rows, noise_rows = self._share_rows
                b_rows.add(msg.self_owners, u, msg.self_shares)
                key_rows.add(msg.key_owners, u, msg.key_shares)
                noise_rows.add(msg.noise_owners, u, msg.noise_shares)
            case _:  # unreachable: SERVER_ACCEPTS admits only the kinds above
                raise ProtocolError(f"server cannot handle a {kind.name} message")

    def _accumulate(self, u: int, y: np.ndarray) -> None:
        """Add a fully checked y_u to the running sum and record u in U3, in one step.

        The sum is kept in ``word_dtype(bits)`` (uint32 for bits <= 32), wrapping mod 2^w; since 2^bits
        divides 2^w the truncating cast and the wrap-around are exact mod 2^bits. Memory: one vector of d
        words, whatever the number of clients.
        """
        if self._acc is None:
            self._acc = masking.new_accumulator(np.zeros(self.dim, dtype=np.uint64), self.bits)
        np.add(self._acc, y.astype(self._acc.dtype, copy=False), out=self._acc)
        self._masked.add(u)

    def _on_advertise(self, u: int, msg: m.AdvertiseKeys) -> None:
        if is_low_order(msg.enc_pk) or is_low_order(msg.mask_pk):
            raise ProtocolError(f"client {u} advertised a low-order X25519 key; it is left out of the round")
        if self.security == "active":
            try:
                verify_keys(self._registry(), self.round_id, u, msg.enc_pk, msg.mask_pk, msg.signature)
            except AuthenticationError:
                raise ProtocolError(f"AdvertiseKeys of client {u} fails signature verification") from None
        self._keys[u] = (msg.enc_pk, msg.mask_pk, msg.signature)

    def _registry(self) -> KeyRegistry:
        """The identity-key registry (active mode, where the constructor requires it)."""
        if self.registry is None:
            raise ProtocolError("semi-honest server has no identity-key registry")
        return self.registry

    def _expect_sender(self, kind: m.Kind, u: int) -> None:
        """Refuse a sender that is not expected in this stage, or that already sent (before parsing)."""
        if kind is m.Kind.ADVERTISE_KEYS:
            if u > m.MAX_CLIENT_ID:
                raise ProtocolError(f"invalid sender id {u}")
            if u in self._keys:
                raise ProtocolError(f"duplicate AdvertiseKeys from client {u}")
            if self.security == "active" and u not in self._registry():
                raise ProtocolError(f"AdvertiseKeys from client {u}, which has no registered identity")
            if len(self._keys) >= self.max_clients:
                raise ProtocolError(
                    f"round is full: the full graph admits at most {self.max_clients} clients (GF(65537) points)"
                )
            return
        allowed, seen, what = {
            m.Kind.SHARE_KEYS: (self._u1, self._shares, "ShareKeys"),
            m.Kind.MASKED_INPUT: (self._u2, self._masked, "MaskedInput"),
            m.Kind.SURVIVOR_SIGNATURE: (self._u3, self._sigs, "SurvivorSignature"),
            m.Kind.UNMASK_RESPONSE: (self._responders, self._responses, "UnmaskResponse"),
        }[kind]
        if u not in allowed:
            raise ProtocolError(f"{what} from unknown or excluded client {u}")
        if u in seen:
            raise ProtocolError(f"duplicate {what} from client {u}")

    def _size_cap(self, kind: m.Kind, u: int) -> int:
        """Largest well-formed message of ``kind`` from client ``u`` under this round's parameters."""
        if kind is m.Kind.ADVERTISE_KEYS:
            return _HEAD + 64 + m.SIG_LEN
        if kind is m.Kind.SHARE_KEYS:
            tail = box_tail(self._enforce)
            boxes = (len(self._holders[u]) - 1) * (8 + _BOX_LEN + tail)
            return _HEAD + 32 + 4 + boxes + (32 if tail else 0)
        if kind is m.Kind.MASKED_INPUT:
            return _HEAD + 5 + wire.packed_len(self.dim, self.bits)
        if kind is m.Kind.SURVIVOR_SIGNATURE:
            return _HEAD + m.SIG_LEN
        h = len(self._holders[u])
        noise = 4 + h * (4 + 4 * m.NOISE_PIECES) if asked_group(self._enforce) else 0
        return _HEAD + 12 + h * (4 + _SHARE_ROW + 4) + noise

    # -- deadlines -----------------------------------------------------------------------------------------
    def advance(self) -> Outgoing:
        """Close the current stage: check the threshold, then emit the next stage's messages."""
        return list(self.advance_deferred())

    def advance_deferred(self) -> Outgoing | DeferredOutgoing:
        """:meth:`advance`, except that a downlink of one message per client comes back as a
        :class:`DeferredOutgoing` whose entries are serialised when read (the same bytes, in the same
        order)."""
        if self.stage not in SERVER_ACCEPTS:
            raise ProtocolError(f"server in stage {self.stage.name} has nothing to advance")
        nxt = SERVER_ADVANCE[self.security][self.stage]
        out: _Deferrable
        if self.stage is ServerStage.COLLECT_KEYS:
            out = self._close_keys()
        elif self.stage is ServerStage.COLLECT_SHARES:
            out = self._close_shares()
        elif self.stage is ServerStage.COLLECT_MASKED:
            out = self._close_masked()
        elif self.stage is ServerStage.COLLECT_SIGNATURES:
            out = self._close_signatures()
        else:
            self.outcome = self._finish()
            out = []
        self.stage = nxt
        return out

    def _abort(self, why: str) -> AbortError:
        self.stage = ServerStage.ABORTED
        self._masked.clear()
        self._acc = None
        self._shares.clear()
        self._responses.clear()
        self._share_rows = ()
        return AbortError(f"round aborted: {why}")

    def _need(self, name: str, clients: Sized) -> None:
        if len(clients) < self.threshold:
            raise self._abort(f"{len(clients)} clients {name} < threshold {self.threshold}")

    def _close_keys(self) -> _Deferrable:
        self._need("checked in", self._keys)
        self._u1 = frozenset(self._keys)
        ids = tuple(sorted(self._u1))
        if self._enforce is not None:  # N = the roster size, known to every client from its roster message
            self._enforce.on_roster(len(ids))
        full = self.k is None or self.k >= len(ids) - 1
        if full and self.k is not None and self.security == "active":
            raise self._abort(
                f"{len(ids)} check-ins <= neighbours + 1 = {self.k + 1}: active clients configured with degree "
                f"{self.k} refuse to treat the roster as a full graph"
            )
        holders = len(ids) if full or self.k is None else self.k + 1
        need = min_threshold(holders, neighbours=None if full else self.k, security=self.security)
        if self.threshold < need:
            raise self._abort(
                f"threshold {self.threshold} is unsafe in {self.security} mode with {holders} share holders per "
                f"secret (need >= {need}); honest clients would refuse the roster"
            )
        enc = np.frombuffer(b"".join(self._keys[u][0] for u in ids), dtype=np.uint8).reshape(-1, 32).copy()
        mask = np.frombuffer(b"".join(self._keys[u][1] for u in ids), dtype=np.uint8).reshape(-1, 32).copy()
        sigs = np.frombuffer(b"".join(self._keys[u][2] for u in ids), dtype=np.uint8).reshape(-1, m.SIG_LEN).copy()
        tree = merkle.MerkleTree(m.roster_leaves(ids, enc, mask, sigs))
        self._roster_statement = roster_statement(self.round_id, len(ids), tree.root)
        graph_seed = roster_graph_seed(self.round_id, len(ids), tree.root)
        self._graph = roster_graph(ids, self.k, graph_seed)
        if full:
            everyone = frozenset(ids)
            self._holders = dict.fromkeys(ids, everyone)  # one shared set: everyone holds a share of everything
        else:
            self._holders = _HolderSets(self._graph)  # neighbours and u, from the graph's rows on access
        short = [u for u in ids if len(self._holders[u]) < self.threshold]
        if short:
            raise self._abort(f"clients {short[:5]} have fewer than threshold share holders")
        if full:  # one point per client, shared by every secret
            points = holder_points(ids)
            self._points = dict.fromkeys(ids, points)
        else:  # neighbourhood-local points in [1, k + 1], computed when asked for (not kept: O(n k))
            self._points = _HolderPoints(self._holders)
        n = len(ids)
        if full:  # every client needs every entry: one broadcast of the whole committed roster
            every = tuple(range(n))
            roster = m.KeyRoster(self.round_id, m.SERVER, m.BROADCAST, n, tree.root, every, ids, enc, mask, sigs)
            return [(m.BROADCAST, roster.to_bytes())]
        # SecAgg+: each client gets its share holders' entries and their multiproof, O(k log n) bytes.
        # Each slice is built when read (DeferredOutgoing), from the tree and key arrays fixed here.
        graph, round_id = self._graph, self.round_id
        rows = graph.index(graph.rows(graph.ids).ravel()).reshape(n, -1)  # leaf indices of each one's neighbours

        def slice_for(i: int) -> bytes:
            at = np.unique(np.append(rows[i], i))
            proof = tree.multiproof(at.tolist())
            return m.KeyRoster(
                round_id,
                m.SERVER,
                ids[i],
                n,
                tree.root,
                tuple(at.tolist()),
                tuple(graph.ids[at].tolist()),
                enc[at],
                mask[at],
                sigs[at],
                np.frombuffer(b"".join(proof), dtype=np.uint8).reshape(-1, m.HASH_LEN).copy(),
            ).to_bytes()

        return DeferredOutgoing(ids, slice_for)

    def _close_shares(self) -> Outgoing:
        self._need("shared keys", self._shares)
        self._u2 = frozenset(self._shares)
        # Who sent v a box, and where in the sender's message: (senders, box positions) per recipient. Boxes
        # are cut out of the received bytes one bundle at a time, so no second copy of all O(n k) boxes exists
        # next to the received messages and the bundles.
        # As three int arrays sorted by (recipient, sender) -- not n lists of ints: O(n k) int objects.
        owners = sorted(self._u2)
        counts = [self._shares[u].recipients.size for u in owners]
        u2 = np.asarray(owners, dtype=np.int64)
        src = np.repeat(u2, counts)
        dst = np.concatenate([self._shares[u].recipients for u in owners]) if owners else src
        pos = np.arange(src.size, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
        keep = np.isin(dst, u2)  # recipients that shared keys themselves
        src, dst, pos = src[keep], dst[keep], pos[keep]
        order = np.lexsort((src, dst))
        src, dst, pos = src[order], dst[order], pos[order]
        del keep, order
        # Only each commitment to b_u is needed after the boxes are forwarded.
        self._commitments = {u: sent.commitment for u, sent in self._shares.items()}
        # Bundles are built in ring order and a ShareKeys is let go once its last box is cut: a sender's
        # recipients are its ring neighbours, so only O(k) received messages are alive next to the bundles
        # (in id order each would live until nearly the end: the bundles and all n k boxes twice over).
        got, many = np.unique(src, return_counts=True)
        left = dict.fromkeys(owners, 0) | dict(zip(got.tolist(), many.tolist(), strict=True))
        ring = self._graph.order.tolist() if not self._graph.full else owners
        out = []
        for v in (v for v in ring if v in left):
            lo, hi = int(np.searchsorted(dst, v)), int(np.searchsorted(dst, v, side="right"))
            senders, at = src[lo:hi].tolist(), pos[lo:hi].tolist()
            boxes = tuple(self._shares[u].box(j) for u, j in zip(senders, at, strict=True))
            out.append((v, m.ShareBundle(self.round_id, m.SERVER, v, tuple(senders), boxes).to_bytes()))
            del boxes
            for u in senders:
                left[u] -= 1
                if not left[u]:
                    del self._shares[u]
        self._shares.clear()  # ShareKeys are refused from now on by stage, so no "already sent" record is needed
        out.sort(key=lambda e: e[0])  # the documented order: by recipient id
        return out

    def _close_masked(self) -> _Deferrable:
        self._need("sent masked inputs", self._masked)
        self._u3 = frozenset(self._masked)
        self._responders = frozenset()
        if self.security == "active":  # consistency round: every survivor signs the same U3 (and roster)
            lists = survivor_lists(self.round_id, self._graph, self._u3)
            self._signed_count = lists.count  # the count the clients verify from the tree's root and sign
            self._statement = consistency_statement(self.round_id, self._roster_statement, lists.root, lists.count)
            to = sorted(self._u3)
            return DeferredOutgoing(to, lambda i: lists.message(to[i]).to_bytes())
        return self._unmask_requests(self._u3, {})

    def _close_signatures(self) -> _Deferrable:
        self._need("signed the survivor set", self._sigs)
        return self._unmask_requests(frozenset(self._sigs), self._sigs)

    def _unmask_requests(self, responders: frozenset[int], sigs: dict[int, bytes]) -> DeferredOutgoing:
        """One UnmaskRequest per responder; in active mode with enough survivor-set signatures for the client
        to see t signers among the holders of every secret it holds a share of (:meth:`_signer_cover`). The
        requests (what each responder must answer) are fixed here; each message is serialised when read."""
        pick = self._signer_cover(sigs) if sigs else None
        if self._enforce is not None:  # d = N - |U3|: remove the groups whose every level lies above d
            count = self._signed_count if self.security == "active" else len(self._u3)  # as the clients count it
            self._enforce.choose_group(len(self._u1) - count)
        self._responders = frozenset(responders)
        to = sorted(responders)
        round_id, group = self.round_id, asked_group(self._enforce)
        alive_n, gone_n = self._request_sizes(to)  # the share tables' sizes (unfilled pages cost no memory)
        self._share_rows = (
            _ShareRows(alive_n, _SHARE_ROW // 4),
            _ShareRows(gone_n, _SHARE_ROW // 4),
            _ShareRows(alive_n if group else 0, m.NOISE_PIECES),
        )

        def request_for(i: int) -> bytes:
            u = to[i]
            alive, gone = self._request(u)
            signers, arr = pick(alive | gone) if pick else ((), np.zeros((0, m.SIG_LEN), dtype=np.uint8))
            req = m.UnmaskRequest(round_id, m.SERVER, u, tuple(sorted(alive)), tuple(sorted(gone)), signers, arr, group)
            return req.to_bytes()

        return DeferredOutgoing(to, request_for)

    def _request(self, u: int) -> tuple[frozenset[int], frozenset[int]]:
        """What responder ``u`` is asked about: the owners among its share holders whose b-share (in U3) and
        whose key share (in U2 but not U3) it must send. Computed when needed (U2 and U3 are fixed once the
        requests go out), not kept as two sets per client."""
        mine = self._holders[u] & self._u2
        return mine & self._u3, mine - self._u3

    def _request_sizes(self, to: list[int]) -> tuple[int, int]:
        """Total numbers of b-shares and of key shares the responders ``to`` are asked for (:meth:`_request`),
        counted on the graph's holder rows without building the sets."""
        hs = self._holders
        if not isinstance(hs, _HolderSets):  # full graph: everyone holds everything (n <= shamir.MAX_HOLDERS)
            sizes = [self._request(u) for u in to]
            return sum(len(a) for a, _ in sizes), sum(len(g) for _, g in sizes)
        alive_n = gone_n = 0
        u2 = np.fromiter(self._u2, dtype=np.int64, count=len(self._u2))
        u3 = np.fromiter(self._u3, dtype=np.int64, count=len(self._u3))
        step = 1 << 13
        for a in range(0, len(to), step):
            rows = hs.rows[self._graph.index(np.asarray(to[a : a + step], dtype=np.int64))]
            in2, in3 = np.isin(rows, u2), np.isin(rows, u3)
            alive_n += int((in2 & in3).sum())
            gone_n += int((in2 & ~in3).sum())
        return alive_n, gone_n

    def _signer_cover(self, sigs: dict[int, bytes]) -> Callable[[frozenset[int]], tuple[tuple[int, ...], np.ndarray]]:
        """Choose, once per round, a set S of signers giving every owner v in U2 at least t members of S
        among its share holders (all signers among them when fewer exist); returns ``pick(owners)``, which
        gives one client the (sorted signers, signature rows) of S among the holders of its ``owners``.

        Each forwarded signature costs the client one verification, so S should be small. On the ring,
        holders are windows of k + 1 consecutive clients (plus a chord for odd k); a sweep over the owners
        in ring order tops up each owner's deficit with its most forward unused signers, the greedy that is
        optimal for covering intervals on a line. Cost O(n k) once, then O(k^2) array work per client
        (replacing a per-client greedy of O(k^2) Python steps). Any t signers on the full graph.
        """
        graph, t = self._graph, self.threshold
        if graph.full:
            first = tuple(sorted(sigs)[:t])
            arr = np.frombuffer(b"".join(sigs[v] for v in first), dtype=np.uint8).reshape(-1, m.SIG_LEN)
            return lambda owners: (first, arr.copy())
        n, ring = graph.n, graph.ring_pos  # ring_pos: sorted-id index -> ring position
        cols = np.asarray(sorted([0, *graph.offsets.tolist()], key=lambda d: (abs(d) > (graph.k or 0) // 2, -d)))
        signer_ids = np.fromiter(sigs, dtype=np.int64, count=len(sigs))
        signer_pos = ring[graph.index(signer_ids)]
        avail = np.zeros(n, dtype=bool)
        avail[signer_pos] = True
        owners = np.sort(ring[graph.index(np.fromiter(self._u2, dtype=np.int64, count=len(self._u2)))])
        window = (np.arange(n)[:, None] + cols[None, :]) % n  # row p: ring positions of p's share holders
        need = np.minimum(t, avail[window].sum(axis=1))
        chosen = np.zeros(n, dtype=bool)
        count = np.zeros(n, dtype=np.int64)  # members of S among each position's holders
        for p in owners.tolist():
            deficit = need[p] - count[p]
            if deficit > 0:
                cand = window[p]
                new = cand[avail[cand] & ~chosen[cand]][:deficit]
                chosen[new] = True
                np.add.at(count, window[new].ravel(), 1)
        del window
        sig_at = np.zeros((n, m.SIG_LEN), dtype=np.uint8)  # by ring position
        sig_at[signer_pos] = np.frombuffer(
            b"".join(map(sigs.__getitem__, signer_ids.tolist())), dtype=np.uint8
        ).reshape(-1, m.SIG_LEN)

        def pick(owners: frozenset[int]) -> tuple[tuple[int, ...], np.ndarray]:
            pos = ring[graph.index(np.fromiter(owners, dtype=np.int64, count=len(owners)))]
            near = ((pos[:, None] + cols[None, :]) % n).ravel()
            sel = np.unique(near[chosen[near]])
            by_id = np.argsort(graph.order[sel])
            sel = sel[by_id]
            return tuple(graph.order[sel].tolist()), sig_at[sel]

        return pick

    # -- unmasking -----------------------------------------------------------------------------------------
    def _finish(self) -> RoundOutcome:
        self._need("answered the unmask request", self._responses)
        # The shares, one flat table per kind (owner, evaluation point, row), filled on arrival (receive),
        # instead of the parsed responses and per-owner lists of (point, row) tuples.
        for r in sorted(self._responses):
            for owner in self._responses[r]:
                self.reports.append(f"client {r} rejected the share box from client {owner} (authentication failed)")
        self_sh, key_sh, noise_sh = (
            _ShareTable(
                acc.owners[: acc.size],
                self._holder_points(acc.owners[: acc.size], acc.holders[: acc.size]),
                acc.rows[: acc.size],
            )
            for acc in self._share_rows
        )
        self._share_rows = ()
        dropped = self._u2 - self._u3
        need_keys = sorted(v for v in dropped if self._holders[v] & self._u3)  # v itself is not in U3
        short = [u for u in sorted(self._u3) if self_sh.count(u) < self.threshold]
        short += [v for v in need_keys if key_sh.count(v) < self.threshold]
        if self._enforce is not None:
            short += self._enforce.short(noise_sh.count, sorted(self._u3), self.threshold)
        if short:  # decide before reconstructing anything
            raise self._abort(f"fewer than threshold shares for clients {short[:5]}")

        b_seeds = self._reconstruct_all(
            self_sh,
            list(self._u3),
            lambda u, s: masking.self_mask_commitment(s, round_id=self.round_id, owner=u) == self._commitments[u],
        )
        sk = self._reconstruct_all(
            key_sh,
            need_keys,
            lambda v, s: keypair_from_private(s).public == self._keys[v][1],
        )
        noise_seeds = 0
        if self._enforce is not None:
            noise_seeds = self._enforce.reconstruct(
                list(self._u3), self.round_id, partial(self._reconstruct_all, noise_sh)
            )
        self.reconstructions = len(b_seeds) + len(sk) + noise_seeds
        del self_sh, key_sh, noise_sh

        total, self._acc = self._acc, None  # sum of y_u over U3, accumulated on arrival (_accumulate)
        if total is None:  # U3 is non-empty here (_close_masked checked the threshold), so y_u arrived
            raise self._abort("no masked input was accumulated")
        self._responses.clear()
        for u in sorted(self._u3):
            accumulate_mask(total, b_seeds[u], self.bits, sign=-1)
        for v in need_keys:
            kp = keypair_from_private(sk[v])
            for w in sorted(self._holders[v] & self._u3):
                seed = masking.pairwise_seed(kp, self._keys[w][1], round_id=self.round_id, own_id=v, peer_id=w)
                # y_w carries sign(w, v) * PRG(s_wv); remove it.
                accumulate_mask(total, seed, self.bits, sign=-masking.mask_sign(w, v))
        total = masking.finish_accumulator(total, self.bits)
        removed: tuple[int, ...] = ()
        if self._enforce is not None:  # regenerate the survivors' groups g..G and subtract them in Z_q
            total, removed = self._enforce.remove(total, self.dim, self.bits)
        return RoundOutcome(total, frozenset(self._u3), frozenset(dropped), removed)

    def _holder_points(self, owners: np.ndarray, holders: np.ndarray) -> np.ndarray:
        """Evaluation point of ``holders[i]`` for the secret of ``owners[i]``: 1 + its rank among the
        owner's share holders (:func:`~protocols.graph.holder_points`), vectorised on the SecAgg+ ring."""
        out = np.zeros(owners.size, dtype=np.int64)
        hs = self._holders
        if not isinstance(hs, _HolderSets):  # full graph: one point set for everyone (n <= shamir.MAX_HOLDERS)
            for i, (o, r) in enumerate(zip(owners.tolist(), holders.tolist(), strict=True)):
                out[i] = self._points[o][r]
            return out
        ranked = np.sort(hs.rows, axis=1)  # (n, k + 1): each client's holders in id order
        step = 1 << 13  # rows per chunk: a (step, k + 1) comparison at a time
        for a in range(0, owners.size, step):
            at = ranked[self._graph.index(owners[a : a + step])]
            mine = holders[a : a + step, None]
            if not (at == mine).any(axis=1).all():  # the receive checks make this impossible
                raise ProtocolError("a share came from a client that does not hold that secret")
            out[a : a + step] = (at < mine).sum(axis=1) + 1
        return out

    def _reconstruct_all(self, table: _ShareTable, owners: list[int], verify: _Verify) -> dict[int, bytes]:
        """Reconstruct each owner's 32-byte secret from the t shares of lowest point, batching owners with
        equal points (every owner has at least t shares: checked before)."""
        t = self.threshold
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for owner in owners:
            a, _ = table.span(owner)
            groups[tuple(table.points[a : a + t].tolist())].append(owner)
        out: dict[int, bytes] = {}
        step = 1024  # owners per batch: interpolation is column by column, so batching changes no result
        for pts, everyone in groups.items():
            for first in range(0, len(everyone), step):
                members = everyone[first : first + step]
                starts = np.fromiter((table.span(o)[0] for o in members), dtype=np.int64, count=len(members))
                take = (starts[:, None] + np.arange(t)[None, :]).T  # (t, owners): share rows in the table
                rows = table.rows[table.order[take]].reshape(t, -1)  # (t, owners * width): blocks side by side
                pieces = shamir.reconstruct(pts, rows, threshold=t).reshape(len(members), -1)
                del rows, take
                for o, pc in zip(members, pieces, strict=True):
                    secret = self._decode_verified(o, pc, verify)
                    if secret is None:
                        secret = self._repair(o, table.shares(o), verify)
                    out[o] = secret
        return out

    @staticmethod
    def _decode_verified(owner: int, pieces: np.ndarray, verify: _Verify) -> bytes | None:
        try:
            secret = shamir.decode(pieces)
        except ProtocolError:
            return None
        return secret if verify(owner, secret) else None

    def _repair(self, owner: int, lst: list[tuple[int, np.ndarray]], verify: _Verify) -> bytes:
        """A reconstruction failed verification: report it and retry leaving out one share at a time."""
        self.reports.append(f"reconstruction for client {owner} failed verification; retrying without one share")
        t = self.threshold
        for skip in range(len(lst)):
            rest = lst[:skip] + lst[skip + 1 :]
            if len(rest) < t:
                break
            pts = [x for x, _ in rest[:t]]
            pieces = shamir.reconstruct(pts, np.stack([r for _, r in rest[:t]]), threshold=t)
            secret = self._decode_verified(owner, pieces, verify)
            if secret is not None:
                bad = lst[skip][0]
                self.reports.append(f"share at evaluation point {bad} for client {owner} was corrupt and ignored")
                return secret
        raise self._abort(f"no valid reconstruction for client {owner}")
