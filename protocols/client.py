"""The client role of the secure-aggregation round as a state machine (Bonawitz et al. 2017, Fig. 4; in
``"active"`` mode with the malicious-server additions of Sec. 6: signed keys and the consistency round).

Every incoming message is checked in this order before any state changes: stage/kind pair allowed in our
security mode (:data:`protocols.stages.CLIENT_TRANSITIONS`), declared size, well-formed bytes, round id,
sender (the server) and recipient (us, or a broadcast). Refusals raise :class:`ProtocolError` and leave
the client unchanged. Round parameters that matter for security (mode, threshold, graph degree) are
checked against the client's own :class:`~protocols.security.ClientPolicy`, never taken from the server.
"""

from __future__ import annotations

import itertools
import struct
import threading
from array import array
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from fractions import Fraction

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from protocols import messages as m
from protocols import wire
from protocols.enforcement import ClientEnforcement, box_tail, read_tails, requested_group
from protocols.graph import RosterGraph, holder_points, index_graph, roster_graph_seed, two_hop_positions
from protocols.pki import KeyRegistry
from protocols.security import ClientPolicy, min_threshold
from protocols.stages import CLIENT_TRANSITIONS, ClientStage
from protocols.statements import (
    consistency_statement,
    holders_statement,
    holders_statements,
    sign_keys,
    sign_survivor_set,
    verify_keys,
    verify_survivor_set,
)
from secagg_dp._validate import check_int
from secagg_dp.crypto import aead, masking, merkle, shamir, signing
from secagg_dp.crypto.keys import KeyPair, generate_keypair, load_public
from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AuthenticationError, ParameterError, ProtocolError
from secagg_dp.noise import add_then_remove as atr
from secagg_dp.zq import check_bits, check_residues

__all__ = ["SecAggClient"]

_BOX_LEN = aead.OVERHEAD + m.SharePlaintext.LEN
_HEAD = 28
_ROUND_OPEN_BODY = 22  # p (8), bits (1), dim, threshold, neighbours (4 each), security (1)
_ROSTER_ROW = 4 + 2 * m.KEY_LEN + m.SIG_LEN  # id, two X25519 keys, Ed25519 signature
_U32, _U32X2 = struct.Struct(">I"), struct.Struct(">II")


class _RosterView:
    """What a client derives from one parsed roster: that its rows belong to the committed roster (the
    multiproof), and the graph over the roster's leaf indices. Both are pure functions of the roster
    (immutable), so they are computed once per parsed roster: where one process plays every client (the
    simulation) all clients of a full-graph round hold the same parsed broadcast
    (:func:`protocols.messages.decode`), and each would otherwise redo O(n) work. A proof that fails raises
    ProtocolError (and nothing is remembered)."""

    def __init__(self, roster: m.KeyRoster, k: int | None) -> None:
        roster.verify()
        self.roster, self.k = roster, k
        self.ids = np.asarray(roster.ids, dtype=np.int64)
        self.graph: RosterGraph = index_graph(roster.size, k, roster.graph_seed)
        self._parsed: dict[tuple[bool, int], X25519PublicKey] = {}  # (mask key?, roster row) -> parsed key

    def public_key(self, row: int, *, mask: bool) -> X25519PublicKey:
        """The roster's X25519 key (``mask``: the mask-agreement key, else the channel key) at ``row``,
        parsed once: with one process playing every client, each key is otherwise parsed by k clients."""
        key = self._parsed.get((mask, row))
        if key is None:
            pks = self.roster.mask_pks if mask else self.roster.enc_pks
            key = self._parsed[(mask, row)] = _load_public(pks[row].tobytes())
        return key


_parsed_keys: dict[bytes, X25519PublicKey] = {}
_PARSED_MAX = 1 << 16


def _load_public(raw: bytes) -> X25519PublicKey:
    """``load_public`` remembered by the key's bytes (a pure function of them): with SecAgg+ each client holds
    its own roster entries, so where one process plays every client each key would be parsed by k clients."""
    key = _parsed_keys.get(raw)
    if key is None:
        key = load_public(raw)  # raises on a malformed key; nothing is remembered then
        if len(_parsed_keys) >= _PARSED_MAX:
            _parsed_keys.clear()
        _parsed_keys[raw] = key
    return key


def release_caches() -> None:
    """Forget the parsed roster keys and roster views remembered for the clients of this process
    (:func:`_load_public`, :func:`_roster_view`): they serve only the share-keys stage, and where one process
    plays n SecAgg+ clients they hold about 2 n parsed X25519 keys (roughly 0.5 kB each) until the process ends.
    Called by :class:`~protocols.pool.InProcessClientPool` once every client has shared its keys; harmless at any
    time (a later roster is parsed afresh)."""
    _parsed_keys.clear()
    with _views_lock:
        _views.clear()


class _SpentSource:
    """The client's randomness source after the share-keys stage, the last that draws from it: a seeded
    source holds an OpenSSL AES context (about 1 kB), which a process playing n clients need not keep."""

    __slots__ = ()

    def bytes(self, n: int) -> bytes:
        raise ProtocolError("a client draws no randomness after sharing its keys")


_SPENT = _SpentSource()


class _Kept:
    """What a client keeps of its roster view after the share-keys stage: the graph (shared, O(1) per
    client) and, on the full graph only, the roster's ids. Not the roster message: its entries and
    multiproof (about 9 kB per client at n = 10^3, more at larger n) are not needed after the boxes are made."""

    __slots__ = ("graph", "ids")

    def __init__(self, graph: RosterGraph, ids: np.ndarray) -> None:
        self.graph, self.ids = graph, ids


_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_IDS.flags.writeable = False


class _PeerTable(Mapping[int, tuple[bytes, bytes]]):
    """Our neighbours' channel keys and pairwise mask seeds, ``table[v] = (channel key, s_uv)``, 64 bytes per
    neighbour in one bytes object indexed by a sorted id array: a process playing n clients keeps n k of
    them, and a dict of tuples of parsed X25519 keys cost about 0.6 kB per neighbour."""

    def __init__(self, ids: list[int], rows: list[bytes]) -> None:
        order = sorted(range(len(ids)), key=ids.__getitem__)
        # a compact int64 array searched with bisect: a scalar look-up in C without numpy's per-call overhead
        self._ids = array("q", [ids[i] for i in order])
        self._blob = b"".join(rows[i] for i in order)
        self._width = 64

    def drop_seeds(self) -> None:
        """Forget the pairwise mask seeds once the masked input is sent (only the channel keys, to open the
        boxes at unmasking, are needed after it): 32 bytes per neighbour less. ``table[v]`` is then
        (channel key, b"")."""
        if self._width == 64:
            w = memoryview(self._blob)
            self._blob = b"".join(w[i : i + 32] for i in range(0, len(self._blob), 64))
            self._width = 32

    def _at(self, v: object) -> int:
        if type(v) is not int:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise KeyError(v)
            v = int(v)
        i = bisect_left(self._ids, v)
        if i >= len(self._ids) or self._ids[i] != v:
            raise KeyError(v)
        return i

    def __getitem__(self, v: int) -> tuple[bytes, bytes]:
        i = self._width * self._at(v)
        return self._blob[i : i + 32], self._blob[i + 32 : i + self._width]

    def __contains__(self, v: object) -> bool:
        try:
            self._at(v)
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())

    def __len__(self) -> int:
        return len(self._ids)


class _HolderIndex(Mapping[int, int]):
    """Our share holders' leaf indices by id (SecAgg+), as int arrays instead of a dict of k + 1 ints, with
    their ring positions (known from laying out our neighbourhood, so never computed again)."""

    def __init__(self, ids: list[int], indices: tuple[int, ...], positions: np.ndarray) -> None:
        self._ids = array("q", [int(v) for v in ids])  # ascending; searched with bisect, as in _PeerTable
        self._idx = np.asarray(indices, dtype=np.uint32).reshape(-1)  # leaf indices < n < 2^32: half the bytes
        self.positions = np.asarray(positions, dtype=np.uint32).reshape(-1)  # ring position of each holder

    def _row(self, v: int) -> int:
        i = bisect_left(self._ids, v)
        if i >= len(self._ids) or self._ids[i] != v:
            raise KeyError(v)
        return i

    def position(self, v: int) -> int:
        """Ring position of holder ``v``."""
        return int(self.positions[self._row(v)])

    def __getitem__(self, v: int) -> int:
        return int(self._idx[self._row(v)])

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())

    def __len__(self) -> int:
        return len(self._ids)


_views: list[_RosterView] = []
_views_lock = threading.Lock()


def _roster_view(roster: m.KeyRoster, k: int | None) -> _RosterView:
    """The view of ``roster`` for degree ``k``, remembered for the last few rosters (by identity)."""
    with _views_lock:
        for view in _views:
            if view.roster is roster and view.k == k:
                return view
    view = _RosterView(roster, k)
    with _views_lock:
        _views.insert(0, view)
        del _views[4:]
    return view


class SecAggClient:
    """One honest client holding the encoded vector ``x`` in Z_{2^bits}.

    ``policy`` is the client's own configuration (default: active mode, full graph). Active mode needs the
    client's long-term ``identity`` (Ed25519) and the ``registry`` binding every client id to its identity
    key. ``source`` supplies keys, the self-mask seed, Shamir coefficients, AEAD nonces and the check-in
    coin (``None``: ``os.urandom``; a :class:`~secagg_dp.crypto.SeededRandom` only for simulation).
    """

    def __init__(
        self,
        client_id: int,
        x: np.ndarray,
        *,
        bits: int,
        policy: ClientPolicy | None = None,
        identity: signing.SigningKey | None = None,
        registry: KeyRegistry | None = None,
        source: RandomSource | None = None,
        noise: atr.NoiseSpec | None = None,
        noise_master: bytes | None = None,
    ) -> None:
        self.id = check_int("client_id", client_id, lo=0, hi=m.MAX_CLIENT_ID)
        # add-then-remove noise (docs/noise-enforcement.md), None without: ``noise_master`` (simulation only)
        # fixes the seeds, else they come from ``source``
        self._enforce = ClientEnforcement.of(noise, noise_master)
        self.bits = check_bits(bits)
        arr = check_residues("x", x, self.bits)
        if arr.ndim != 1:
            raise ParameterError(f"Argument 'x' must be 1-D, not shape {arr.shape}.")
        self.policy = ClientPolicy() if policy is None else policy
        if not isinstance(self.policy, ClientPolicy):
            raise TypeError(f"Argument 'policy' must be a ClientPolicy, not {type(policy).__name__}.")
        self.active = self.policy.security == "active"
        if self.active:
            if not isinstance(identity, signing.SigningKey) or not isinstance(registry, KeyRegistry):
                raise ParameterError(
                    "Arguments 'identity' (a SigningKey) and 'registry' (a KeyRegistry) are required in active "
                    "mode. To fix, create them with protocols.pki.create_identities, or pass "
                    "policy=ClientPolicy(security='semi-honest') for a trusted server."
                )
            if client_id not in registry or registry.public_key(self.id) != identity.public:
                raise ParameterError(f"Argument 'identity' is not the key registered for client {self.id}.")
        self._identity, self._registry = identity, registry
        # Our own copy of x, bit-packed (d bits / 8 bytes, immutable): what one process playing n clients keeps.
        self._x, self._dim = wire.pack_residues(arr, self.bits), arr.size
        self._src = resolve_source(source)
        self.stage = ClientStage.IDLE
        self.round_id = b""  # the round we checked in to (empty before; never equal to a 16-byte round id)

    @property
    def _noise_sched(self) -> atr.NoiseSchedule | None:
        """The add-then-remove schedule (None without enforcement or before the roster)."""
        return None if self._enforce is None else self._enforce.schedule

    def __repr__(self) -> str:
        return f"SecAggClient(id={self.id}, stage={self.stage.name}, security={self.policy.security}, dim={self._dim})"

    # -- dispatch ------------------------------------------------------------------------------------------
    def receive(self, data: bytes) -> bytes | None:
        """Handle one serialised message from the server; returns the reply (or None if we declined)."""
        kind = m.peek_kind(data)
        if (self.stage, kind) not in CLIENT_TRANSITIONS[self.policy.security]:
            raise ProtocolError(f"client {self.id} in stage {self.stage.name} refuses a {kind.name} message")
        if kind is m.Kind.ROUND_OPEN:
            return self.decide_check_in(data)
        self._check_size(kind, data)
        self._check_header(kind, data)
        self._check_counts(kind, data)
        msg = m.decode(data)
        if msg.round_id != self.round_id:
            raise ProtocolError(f"client {self.id}: message from another round (replay?)")
        if msg.sender != m.SERVER:
            raise ProtocolError(f"client {self.id}: message not from the server")
        want = (m.BROADCAST, self.id) if kind is m.Kind.KEY_ROSTER else (self.id,)
        if msg.recipient not in want:
            raise ProtocolError(f"client {self.id}: message addressed to {msg.recipient}")
        match msg:  # typed dispatch on the parsed class (its kind was checked against our stage above)
            case m.KeyRoster():
                return self._on_roster(msg)
            case m.ShareBundle():
                return self._on_bundle(msg)
            case m.SurvivorList():
                return self._on_survivor_list(msg)
            case m.UnmaskRequest():
                return self._on_unmask_request(msg)
            case _:  # unreachable: CLIENT_TRANSITIONS admits only the kinds above here
                raise ProtocolError(f"client {self.id} cannot handle a {kind.name} message")

    def _signer(self) -> signing.SigningKey:
        """Our Ed25519 identity key (active mode, where the constructor requires one)."""
        if self._identity is None:
            raise ProtocolError(f"client {self.id}: no identity key to sign with")
        return self._identity

    def _key_registry(self) -> KeyRegistry:
        """The identity registry signatures are checked against (active mode, where the constructor requires it)."""
        if self._registry is None:
            raise ProtocolError(f"client {self.id}: no identity registry to verify with")
        return self._registry

    def _check_size(self, kind: m.Kind, data: bytes) -> None:
        """Refuse a message longer than the largest well-formed one of its kind (:meth:`_size_cap`), before
        any parsing: a ProtocolError naming the kind, the size and the cap."""
        cap = self._size_cap(kind)
        if len(data) > cap:
            raise ProtocolError(f"client {self.id}: {kind.name} message of {len(data)} bytes exceeds the cap {cap}")

    def _size_cap(self, kind: m.Kind) -> int:
        """Largest well-formed message of ``kind`` given the round's parameters and our policy: the roster
        holds at most ``policy.max_clients`` entries (at most ``shamir.MAX_HOLDERS`` on the full graph), the
        bundle one box per neighbour, the survivor list and unmask request at most the roster."""
        if kind is m.Kind.ROUND_OPEN:
            return _HEAD + _ROUND_OPEN_BODY
        if kind is m.Kind.KEY_ROSTER:
            if self._k is None:  # full graph: every entry, at most the population we expect (<= MAX_HOLDERS)
                n_max = min(self.policy.max_clients, shamir.MAX_HOLDERS)
                return _HEAD + 44 + n_max * (4 + _ROSTER_ROW)  # root, size, rows, proof length; no proof
            rows = self._k + 3  # the chord of an odd degree adds one holder
            return _HEAD + 44 + rows * (4 + _ROSTER_ROW) + rows * 32 * m.HASH_LEN
        if kind is m.Kind.SHARE_BUNDLE:
            return _HEAD + 4 + len(self._peers) * (8 + _BOX_LEN + box_tail(self._enforce))
        n = self._n
        if kind is m.Kind.SURVIVOR_LIST:
            chunks = -(-n // 256)
            if self._view.graph.full:
                return _HEAD + 48 + 36 * chunks
            near = (self._view.graph.offsets.size + 1) ** 2  # chunks carried <= two-hop positions <= near
            return _HEAD + 48 + near * (4 + m.HASH_LEN + (4 + m.HASH_LEN) * merkle.depth_for(chunks) + 4)
        # UNMASK_REQUEST: three id counts and the noise group (16), the survivors and dropped clients (together
        # exactly the clients that shared keys with us, and us), and a signature with its signer's id for each
        # signer we accept: the survivors at our two-hop ring positions W(u) (SecAgg+; |W(u)| <= min(n, 2k + 1)
        # for even k, <= min(n, 3k) for odd k with its chord; every client on the full graph); none in
        # semi-honest mode, where no signature is sent.
        signers = self._near.size if self.active else 0
        return _HEAD + 16 + 4 * (len(self._peers) + 1) + (4 + m.SIG_LEN) * signers

    def _check_header(self, kind: m.Kind, data: bytes) -> None:
        """Round id, sender (the server) and recipient (us, or a broadcast for a roster) from the 28-byte
        header, before the body is parsed."""
        _, rid, sender, recipient = wire.parse_header(data)
        if rid != self.round_id:
            raise ProtocolError(f"client {self.id}: message from another round (replay?)")
        if sender != m.SERVER:
            raise ProtocolError(f"client {self.id}: message not from the server")
        if recipient not in ((m.BROADCAST, self.id) if kind is m.Kind.KEY_ROSTER else (self.id,)):
            raise ProtocolError(f"client {self.id}: message addressed to {recipient}")

    def _check_counts(self, kind: m.Kind, data: bytes) -> None:
        """Every refusal that a roster's size and row count decide, made on those two fields before any entry
        is decoded (a 65,505-entry roster otherwise costs seconds to parse before a refusal its size implies).
        The other kinds are small by their caps (:meth:`_size_cap`: with SecAgg+ O(k) ids and signatures and
        O(k^2 log n) proof bytes), so they are parsed before their counts are judged. A message too short to
        hold the fields is left to :func:`protocols.messages.decode` to refuse."""
        head = m.HEADER_LEN
        if kind is m.Kind.KEY_ROSTER and len(data) >= head + m.HASH_LEN + 8:
            size, rows = _U32X2.unpack_from(data, head + m.HASH_LEN)
            self._check_roster_size(size, rows, data[head : head + m.HASH_LEN])

    def _check_roster_size(self, n: int, rows: int, root: bytes) -> None:
        """The refusals a roster's size ``n`` and row count decide (before its entries are parsed): more
        clients than we expect, fewer than the threshold or (active) than our minimum roster, a threshold unsafe
        for that many share holders (active), and a row count other than our share holders' (full graph: n)."""
        pol = self.policy
        if n > pol.max_clients:
            raise ProtocolError(
                f"client {self.id}: roster of {n} clients exceeds the population we expect "
                f"({pol.max_clients}, ClientPolicy.max_clients)"
            )
        if n < self._t:
            raise ProtocolError(f"client {self.id}: roster has {n} < threshold {self._t} clients")
        if self.active and n < pol.roster_floor:
            why = (
                f"our minimum roster {pol.min_roster}"
                if pol.min_roster is not None and n < pol.min_roster
                else f"neighbours + 2 = {self._k + 2}: with our degree {self._k} it would be a full graph"
                if self._k is not None
                else f"our minimum threshold {pol.min_threshold}"
            )
            raise ProtocolError(f"client {self.id}: roster has {n} clients, fewer than {why}")
        full = self._k is None or self._k >= n - 1
        if self.active:
            holders = n if full or self._k is None else self._k + 1
            need = min_threshold(holders, neighbours=None if full else self._k, security="active")
            if self._t < need:
                raise ProtocolError(
                    f"client {self.id}: threshold {self._t} is unsafe against an active server with {holders} "
                    f"share holders per secret (need >= {need})"
                )
        want = n if full else 1 + index_graph(n, self._k, roster_graph_seed(self.round_id, n, root)).offsets.size
        if rows != want:
            raise ProtocolError(f"client {self.id}: roster does not carry exactly the entries of our share holders")

    # -- stage 0/1: check-in and AdvertiseKeys -------------------------------------------------------------
    def decide_check_in(self, data: bytes) -> bytes | None:
        """Check the announced round against our policy, flip our own coin with the round's probability p,
        and if it says yes, advertise two X25519 keys (signed with our identity key in active mode).

        The coin is a 64-bit word from ``source`` compared with floor(p 2^64), so P[yes] = p up to 2^-64.
        """
        if self.stage is not ClientStage.IDLE:
            raise ProtocolError(f"client {self.id} in stage {self.stage.name} refuses a ROUND_OPEN message")
        self._check_size(m.Kind.ROUND_OPEN, data)
        msg = m.decode(data)
        if not isinstance(msg, m.RoundOpen) or msg.sender != m.SERVER or msg.recipient != m.BROADCAST:
            raise ProtocolError(f"client {self.id}: not a round-open broadcast from the server")
        if msg.bits != self.bits or msg.dim != self._dim:
            raise ProtocolError(f"client {self.id}: round expects {msg.dim} values mod 2^{msg.bits}")
        pol = self.policy
        if msg.security != m.SECURITY_CODES[pol.security]:
            raise ProtocolError(f"client {self.id}: round is not announced in our security mode {pol.security!r}")
        if msg.threshold < pol.min_threshold:
            raise ProtocolError(
                f"client {self.id}: round threshold {msg.threshold} is below our minimum {pol.min_threshold}"
            )
        if (msg.neighbours or None) != pol.neighbours:
            raise ProtocolError(
                f"client {self.id}: round uses neighbours={msg.neighbours or None}, our policy says {pol.neighbours}"
            )
        coin = int.from_bytes(self._src.bytes(8), "big")
        if coin >= int(Fraction(msg.p) * (1 << 64)):
            self.stage = ClientStage.DECLINED
            return None
        self._enc: KeyPair = generate_keypair(source=self._src)
        self._mask: KeyPair = generate_keypair(source=self._src)
        self.round_id, self._t, self._k = msg.round_id, msg.threshold, msg.neighbours or None
        sig = bytes(m.SIG_LEN)
        if self.active:
            sig = sign_keys(self._signer(), self.round_id, self.id, self._enc.public, self._mask.public)
        self.stage = ClientStage.KEYS_ADVERTISED
        return m.AdvertiseKeys(self.round_id, self.id, m.SERVER, self._enc.public, self._mask.public, sig).to_bytes()

    # -- stage 2: ShareKeys ----------------------------------------------------------------------------------
    def _check_roster(self, msg: m.KeyRoster, view: _RosterView, nbrs: list[int], rows: np.ndarray) -> None:
        """Active mode: threshold safe for this roster, and every entry we use (``nbrs``, at message ``rows``)
        signed by its owner's registered identity key over this round."""
        enc, mask, sigs = msg.enc_pks[rows].tobytes(), msg.mask_pks[rows].tobytes(), msg.signatures[rows].tobytes()
        kl, sl, keys = m.KEY_LEN, m.SIG_LEN, self._key_registry()
        for j, v in enumerate(nbrs):
            key, mkey = enc[j * kl : (j + 1) * kl], mask[j * kl : (j + 1) * kl]
            try:
                verify_keys(keys, msg.round_id, v, key, mkey, sigs[j * sl : (j + 1) * sl])
            except AuthenticationError:
                raise ProtocolError(
                    f"client {self.id}: roster entry of client {v} fails signature verification"
                ) from None
        # A low-order key that slipped through makes the key agreement below raise AuthenticationError
        # (a ProtocolError): the roster is refused without a separate check per entry.

    def _on_roster(self, msg: m.KeyRoster) -> bytes:
        self._check_roster_size(msg.size, len(msg.ids), msg.root)  # made before parsing too (_check_counts)
        view = _roster_view(msg, self._k)  # checks the multiproof: the rows belong to the committed roster
        ids, n, graph = view.ids, msg.size, view.graph
        pos = int(np.searchsorted(ids, self.id))
        if pos >= ids.size or ids[pos] != self.id:
            raise ProtocolError(f"client {self.id}: not in the roster")
        if msg.enc_pks[pos].tobytes() != self._enc.public or msg.mask_pks[pos].tobytes() != self._mask.public:
            raise ProtocolError(f"client {self.id}: roster carries keys that are not ours")
        index = msg.indices[pos]
        if graph.full:
            want: list[int] | range = range(n)
        else:  # our position pi(index) and our neighbours' leaves pi^-1(position + offsets): O(k), once
            me = int(graph.position_of([index])[0])
            window = np.append((me + graph.offsets) % n, me)
            leaf_at = dict(zip(graph.rank_at(window).tolist(), window.tolist(), strict=True))
            want = sorted(leaf_at)
        if list(msg.indices) != list(want):
            raise ProtocolError(f"client {self.id}: roster does not carry exactly the entries of our share holders")
        holders = ids.tolist()  # exactly our share holders (and us), ascending
        rows = np.arange(ids.size)  # message row of each holder
        if self.active:
            mine = holders.index(self.id)
            self._check_roster(msg, view, holders[:mine] + holders[mine + 1 :], np.delete(rows, mine))
        if len(holders) < self._t:
            raise ProtocolError(f"client {self.id}: {len(holders)} share holders < threshold {self._t}")
        points = holder_points(holders)
        self_seed = masking.new_self_mask_seed(source=self._src)
        shares = shamir.share(
            [self._mask.private, self_seed], threshold=self._t, points=[points[v] for v in holders], source=self._src
        )
        digest = bytes(32) if graph.full else holders_statement(self.round_id, self.id, holders)
        plaintexts = m.SharePlaintext.pack_rows(self.id, holders, shares, digest)
        noise_commit, enf = b"", self._enforce
        if enf is not None:  # the removable groups' seeds, shared like b_u with the same holders
            enf.on_roster(n)
            plaintexts, noise_commit = enf.share_boxes(
                plaintexts,
                [points[v] for v in holders],
                holders.index(self.id),
                threshold=self._t,
                round_id=self.round_id,
                owner=self.id,
                source=self._src,
            )
        me, rid, src = self.id, self.round_id, self._src
        peer_rows = [(j, v, row) for j, (v, row) in enumerate(zip(holders, rows.tolist(), strict=True)) if v != me]
        own = shares[holders.index(me)].copy()  # not a view: it would keep all k + 1 shares alive until unmasking
        # channel keys and s_uv (now rather than at masking time: we keep 32 bytes, not the parsed mask key)
        pair = masking.neighbour_secrets(
            self._enc,
            self._mask,
            [(v, view.public_key(row, mask=False), view.public_key(row, mask=True)) for _, v, row in peer_rows],
            round_id=rid,
            own_id=me,
        )
        recipients = [v for _, v, _ in peer_rows]
        boxes = [
            aead.seal(ck, plaintexts[j], aead.associated_data(rid, me, v), source=src)
            for (j, v, _), (ck, _) in zip(peer_rows, pair, strict=True)
        ]
        secrets = [ck + s_uv for ck, s_uv in pair]
        commitment = masking.self_mask_commitment(self_seed, round_id=self.round_id, owner=self.id)
        out = m.ShareKeys(
            self.round_id, self.id, m.SERVER, commitment, tuple(recipients), tuple(boxes), noise_commit
        ).to_bytes()
        self._self_seed, self._own_share, self._peers = self_seed, own, _PeerTable(recipients, secrets)
        kept = _Kept(graph, view.ids if graph.full else _NO_IDS)  # SecAgg+: our holders' ids are in _index_of
        self._n, self._view, self._index, self._roster_statement = n, kept, index, msg.statement
        self._index_of = (  # SecAgg+: our holders' leaf indices and ring positions (full graph: empty)
            _HolderIndex([], (), np.zeros(0))
            if graph.full
            else _HolderIndex(holders, msg.indices, np.asarray([leaf_at[i] for i in msg.indices]))
        )
        del self._enc, self._mask  # both X25519 key pairs are spent: channel keys and s_uv are derived
        self._src = _SPENT  # no randomness is drawn after this stage (a seeded source holds an AES context)
        self.stage = ClientStage.SHARES_SENT
        return out

    # -- stage 3: MaskedInputCollection ----------------------------------------------------------------------
    def _on_bundle(self, msg: m.ShareBundle) -> bytes:
        unknown = [v for v in msg.senders if v not in self._peers]
        if unknown:
            raise ProtocolError(f"client {self.id}: boxes from clients that are not our neighbours: {unknown[:5]}")
        if len(msg.senders) + 1 < self._t:
            raise ProtocolError(f"client {self.id}: only {len(msg.senders) + 1} share holders left < threshold")
        pairwise = [(self._peers[v][1], masking.mask_sign(self.id, v)) for v in msg.senders]
        y = self._masked_packed(pairwise)
        del pairwise
        # Our input and the mask seeds are spent once y is sent (a process playing n clients would otherwise
        # keep n d bits / 8 bytes of inputs and 32 n k bytes of seeds through the last two stages).
        self._x = b""
        self._self_seed = b""
        self._peers.drop_seeds()
        self._store_boxes(msg.senders, msg.boxes)
        self.stage = ClientStage.MASKED_INPUT_SENT
        return m.MaskedInput.encode_packed(self.round_id, self.id, m.SERVER, self.bits, self._dim, bytes(y))

    def _store_boxes(self, senders: tuple[int, ...], boxes: tuple[bytes, ...]) -> None:
        """Keep the boxes addressed to us until unmasking as one blob, by sender id (sorted), with their end
        offsets: a process playing n clients keeps n k boxes, and one bytes object per box costs about as
        much again as the box itself."""
        order = sorted(range(len(senders)), key=senders.__getitem__)
        self._box_ids = array("q", [senders[i] for i in order])  # searched with bisect
        self._box_ends = array("q", itertools.accumulate(len(boxes[i]) for i in order))
        self._box_blob = b"".join(boxes[i] for i in order)

    def _box(self, sender: int) -> bytes:
        """The box ``sender`` addressed to us (``sender`` must be one of ``_box_ids``)."""
        i = bisect_left(self._box_ids, sender)
        start = self._box_ends[i - 1] if i else 0
        return self._box_blob[start : self._box_ends[i]]

    def _masked_packed(self, pairwise: list[tuple[bytes, int]]) -> bytearray:
        """y = x + masks (:func:`~secagg_dp.crypto.masking.mask_input`), computed and packed block by block
        from our packed x: no unpacked vector of length d and no mask vector of length d exists at once."""
        d, bits, blk = self._dim, self.bits, wire.PACK_BLOCK
        x_blocks: Iterator[np.ndarray] = (
            wire.unpack_residues(self._x, d, bits, start=i, stop=min(i + blk, d)) for i in range(0, d, blk)
        )
        if self._enforce is not None:  # x + level 0 + every group
            x_blocks = self._enforce.add_noise(x_blocks, d, bits)
        out = bytearray(wire.packed_len(d, bits))
        blocks = masking.mask_input_blocks(x_blocks, bits=bits, self_seed=self._self_seed, pairwise=pairwise)
        for i, yb in zip(range(0, d, blk), blocks, strict=True):
            wire.pack_residues_into(out, i, yb, bits)
        return out

    # -- stage 4 (active): ConsistencyCheck --------------------------------------------------------------------
    def _on_survivor_list(self, msg: m.SurvivorList) -> bytes:
        """Check the survivor commitment's part we need against its root, derive |U3| from the root's count
        (the Merkle sum tree: our leaves' popcounts and the siblings' counts, each at most the ring positions
        under it; never a separate field), find ourselves in it, and sign the roster and the survivor set
        together (:func:`protocols.statements.consistency_statement`)."""
        graph, n = self._view.graph, self._n
        chunks = -(-n // 256)
        me = int(graph.position_of([self._index])[0]) if graph.full else self._index_of.position(self.id)
        if graph.full:
            near = np.arange(n)
            want = list(range(chunks))
        else:
            near = two_hop_positions(graph, me)  # ring positions, ascending
            want = np.unique(near // 256).tolist()
        if list(msg.chunk_indices) != want:
            raise ProtocolError(f"client {self.id}: survivor list does not carry the part of U3 we need")
        if msg.chunk_indices[-1] == chunks - 1 and n % 256:  # bits past the last ring position stay zero
            tail = np.unpackbits(msg.chunks[-1])[n % 256 :]
            if tail.any():
                raise ProtocolError(f"client {self.id}: survivor bitmap marks positions beyond the roster")
        leaves = {c: m.survivor_leaf(row) for c, row in zip(msg.chunk_indices, msg.chunks, strict=True)}
        count = merkle.verify_sum_multiproof(msg.root, chunks, leaves, msg.proof_nodes(), unit=256, total=n)
        if msg.count != count:
            raise ProtocolError(
                f"client {self.id}: survivor list states {msg.count} survivors, its committed tree counts {count}"
            )
        where = {c: j for j, c in enumerate(msg.chunk_indices)}
        bits = np.unpackbits(msg.chunks, axis=1)  # (chunks carried, 256)
        alive_at = bits[[where[int(p) // 256] for p in near], near % 256].astype(bool)
        if not bool(alive_at[int(np.searchsorted(near, me))]):
            raise ProtocolError(f"client {self.id}: survivor list does not include us")
        if count < self._t:
            raise ProtocolError(f"client {self.id}: {count} survivors < threshold {self._t}; refusing to sign")
        if graph.full:
            self._near_ids = self._view.ids[graph.order]  # id at each ring position
        else:
            idx = graph.rank_at(near)  # leaf index at each near position; ids ascend with leaf indices
            if msg.near_ids.size != near.size:
                raise ProtocolError(f"client {self.id}: survivor list names {msg.near_ids.size} nearby clients")
            self._near_ids = np.empty(near.size, dtype=np.int64)
            self._near_ids[np.argsort(idx)] = msg.near_ids
            mine = np.fromiter(self._index_of, dtype=np.int64, count=len(self._index_of))  # our holders' ids
            at = self._index_of.positions  # our holders' ring positions, in the order of ``mine``
            wrong = mine[self._near_ids[np.searchsorted(near, at)] != mine]  # the ids we know must agree
            if wrong.size:
                raise ProtocolError(f"client {self.id}: survivor list misplaces client {int(wrong[0])}")
        self._near = near
        self._signed_count = count  # |U3| from the committed tree: bounds the noise groups we will reveal
        self._survivors = np.sort(self._near_ids[alive_at])  # survivors among the holders of what we hold
        statement = consistency_statement(self.round_id, self._roster_statement, msg.root, count)
        sig = sign_survivor_set(self._signer(), statement)
        self._statement = statement
        self.stage = ClientStage.SURVIVORS_SIGNED
        return m.SurvivorSignature(self.round_id, self.id, m.SERVER, sig).to_bytes()

    def _holders_of(self, owners: list[int]) -> np.ndarray:
        """Ids of each owner's share holders (SecAgg+), one ascending row per owner, read from the survivor
        list's ids at the owner's ring window."""
        graph = self._view.graph
        at = np.asarray([self._index_of.position(v) for v in owners], dtype=np.int64)
        window = (at[:, None] + np.concatenate([[0], graph.offsets])[None, :]) % graph.n
        rows: np.ndarray = np.sort(self._near_ids[np.searchsorted(self._near, window)], axis=1)
        return rows

    def _check_signatures(self, msg: m.UnmaskRequest, owners: list[int], digests: dict[int, bytes]) -> None:
        """Active mode: every forwarded signature is valid on the statement we signed, and each client whose
        share we would reveal (``owners``) has at least t signers among its own share holders. SecAgg+: the
        holders' ids come from the survivor list, checked against what each owner stated in its share box
        (``digests``)."""
        statement, keys = self._statement, self._key_registry()
        rows = msg.signatures.tobytes()
        sl = m.SIG_LEN
        signers = np.asarray(msg.signers, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._survivors, signers), self._survivors.size - 1)
        outside = signers[self._survivors[at] != signers] if self._survivors.size else signers
        if outside.size:
            raise ProtocolError(
                f"client {self.id}: signature from {int(outside[0])}, who is not in the survivor set or holds no "
                "share of a secret we hold a share of"
            )
        for j, v in enumerate(msg.signers):
            try:
                verify_survivor_set(keys, v, statement, rows[j * sl : (j + 1) * sl])
            except AuthenticationError:
                raise ProtocolError(f"client {self.id}: survivor-set signature of client {v} is invalid") from None
        if self._view.graph.full:  # every signer (all in the roster) is a holder of every secret
            counts = np.full(len(owners), len(msg.signers))
        else:
            holders = self._holders_of(owners)
            for v, stated in zip(owners, holders_statements(self.round_id, owners, holders), strict=True):
                if stated != digests[v]:
                    raise ProtocolError(
                        f"client {self.id}: the server names share holders of client {v} that {v} did not state"
                    )
            counts = np.isin(holders, signers).sum(axis=1)
        short = [v for v, count in zip(owners, counts.tolist(), strict=True) if count < self._t]
        if short:
            raise ProtocolError(
                f"client {self.id}: fewer than threshold {self._t} survivor-set signatures from the share holders "
                f"of clients {short[:5]}; refusing to unmask"
            )

    # -- stage 5: Unmasking ----------------------------------------------------------------------------------
    def _on_unmask_request(self, msg: m.UnmaskRequest) -> bytes:
        alive, gone = set(msg.survivors), set(msg.dropped)
        if alive & gone:
            raise ProtocolError(
                f"client {self.id}: clients listed as both dropped and surviving: {sorted(alive & gone)[:5]}"
            )
        if self.id not in alive:
            raise ProtocolError(f"client {self.id}: request does not list us as a survivor")
        known = set(self._box_ids.tolist()) | {self.id}
        if alive | gone != known:
            raise ProtocolError(f"client {self.id}: request must classify exactly the clients that shared keys with us")
        if len(alive) < self._t:
            raise ProtocolError(f"client {self.id}: {len(alive)} survivors < threshold {self._t}; refusing to unmask")
        if self.active and alive != known & set(self._survivors.tolist()):
            raise ProtocolError(f"client {self.id}: unmask request contradicts the survivor set we signed")
        half = shamir.PIECES_PER_32_BYTES
        group = requested_group(
            self._enforce,
            self.id,
            msg.noise_group,
            active=self.active,
            full=self._view.graph.full,
            roster=self._n,
            signed=self._signed_count if self.active else 0,
            listed=len(alive),
            phantoms=lambda: self._phantoms(known),
        )
        owners, plaintexts, failed, tails = [], [], [], []
        plen = m.SharePlaintext.LEN
        for v in sorted(known - {self.id}):
            try:
                ad = aead.associated_data(self.round_id, v, self.id)
                opened = aead.open_sealed(self._peers[v][0], self._box(v), ad)
                plaintexts.append(opened[:plen])
                tails.append(opened[plen:])
                owners.append(v)
            except AuthenticationError:
                failed.append(v)  # reported to the server; never fatal on its own
        ok, rows = m.SharePlaintext.unpack_rows(plaintexts, owners, self.id)
        noise_rows = read_tails(self._enforce, tails, ok)
        failed = sorted(
            failed + [v for v, good in zip(owners, ok.tolist(), strict=True) if not good]
        )  # malformed or misnamed
        if self.active:  # before anything is revealed
            good_owners = [v for v, good in zip(owners, ok.tolist(), strict=True) if good]
            digests = {v: p[-32:] for v, p, good in zip(owners, plaintexts, ok.tolist(), strict=True) if good}
            if not self._view.graph.full:
                digests[self.id] = holders_statement(self.round_id, self.id, self._index_of)
            self._check_signatures(msg, [self.id, *good_owners], digests)
        self_owners, self_rows, key_owners, key_rows = [self.id], [self._own_share[half:]], [], []
        alive_noise = []  # (owner, its noise-seed share rows) of each survivor whose b-share we reveal
        for v, good, row, nrow in zip(owners, ok.tolist(), rows, noise_rows, strict=True):
            if good and v in alive:
                self_owners.append(v)
                self_rows.append(row[half:])
                alive_noise.append((v, nrow))
            elif good:
                key_owners.append(v)
                key_rows.append(row[:half])
        noise_owners, noise_out = self._enforce.reveal(self.id, group, alive_noise) if self._enforce else ([], [])
        out = m.UnmaskResponse(
            self.round_id,
            self.id,
            m.SERVER,
            tuple(self_owners),
            np.array(self_rows, dtype=np.uint32).reshape(-1, half),
            tuple(key_owners),
            np.array(key_rows, dtype=np.uint32).reshape(-1, half),
            tuple(failed),
            tuple(noise_owners),
            np.array(noise_out, dtype=np.uint32).reshape(-1, m.NOISE_PIECES),
        ).to_bytes()
        self.stage = ClientStage.DONE
        # The round is over for us (DONE accepts no message): let go of the boxes, channel keys and survivor
        # views, about 10 kB per SecAgg+ client, before the server reconstructs (one process may play n clients).
        del self._box_blob, self._box_ids, self._box_ends, self._peers, self._own_share
        if self.active:
            del self._near_ids, self._near, self._survivors
        return out

    def _phantoms(self, known: set[int]) -> set[int]:
        """Active mode: the clients the signed survivor set counts among our share holders that never sent us a
        share box (``known``: those that did, and us); :func:`protocols.enforcement.requested_group` refuses to
        reveal noise seeds if there are any."""
        holders = set(self._view.ids.tolist()) if self._view.graph.full else set(self._index_of) | {self.id}
        return (set(self._survivors.tolist()) & holders) - known
