"""The client role of the secure-aggregation round as a state machine (Bonawitz et al. 2017, Fig. 4; in
``"active"`` mode with the malicious-server additions of Sec. 6: signed keys and the consistency round).

Every incoming message is checked in this order before any state changes: stage/kind pair allowed in our
security mode (:data:`protocols.stages.CLIENT_TRANSITIONS`), declared size, well-formed bytes, round id,
sender (the server) and recipient (us, or a broadcast). Refusals raise :class:`ProtocolError` and leave
the client unchanged. Round parameters that matter for security (mode, threshold, graph degree) are
checked against the client's own :class:`~protocols.security.ClientPolicy`, never taken from the server.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from protocols import messages as m
from protocols.graph import holder_points, neighbourhoods_for, neighbours_of, roster_graph_seed
from protocols.pki import KeyRegistry, advertise_statement, survivor_statement
from protocols.security import ClientPolicy, min_threshold
from protocols.stages import CLIENT_TRANSITIONS, ClientStage
from secagg_dp._validate import check_int
from secagg_dp.crypto import aead, masking, shamir, signing
from secagg_dp.crypto.keys import KeyPair, generate_keypair
from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AuthenticationError, ParameterError, ProtocolError
from secagg_dp.zq import check_bits, check_residues

__all__ = ["SecAggClient"]

_BOX_LEN = aead.OVERHEAD + m.SharePlaintext.LEN
_HEAD = 28


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
    ) -> None:
        self.id = check_int("client_id", client_id, lo=0, hi=m.MAX_CLIENT_ID)
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
        self._x = np.array(arr, dtype=np.uint64, copy=True)
        self._src = resolve_source(source)
        self.stage = ClientStage.IDLE
        self.round_id: bytes | None = None

    def __repr__(self) -> str:
        return f"SecAggClient(id={self.id}, stage={self.stage.name}, security={self.policy.security}, dim={self._x.size})"

    # -- dispatch ------------------------------------------------------------------------------------------
    def receive(self, data: bytes) -> bytes | None:
        """Handle one serialised message from the server; returns the reply (or None if we declined)."""
        kind = m.peek_kind(data)
        if (self.stage, kind) not in CLIENT_TRANSITIONS[self.policy.security]:
            raise ProtocolError(f"client {self.id} in stage {self.stage.name} refuses a {kind.name} message")
        if kind is m.Kind.ROUND_OPEN:
            return self.decide_check_in(data)
        cap = self._size_cap(kind)
        if cap is not None and len(data) > cap:
            raise ProtocolError(f"client {self.id}: {kind.name} message of {len(data)} bytes exceeds the cap {cap}")
        msg = m.decode(data)
        if msg.round_id != self.round_id:
            raise ProtocolError(f"client {self.id}: message from another round (replay?)")
        if msg.sender != m.SERVER:
            raise ProtocolError(f"client {self.id}: message not from the server")
        want = m.BROADCAST if kind is m.Kind.KEY_ROSTER else self.id
        if msg.recipient != want:
            raise ProtocolError(f"client {self.id}: message addressed to {msg.recipient}")
        if kind is m.Kind.KEY_ROSTER:
            return self._on_roster(msg)
        if kind is m.Kind.SHARE_BUNDLE:
            return self._on_bundle(msg)
        if kind is m.Kind.SURVIVOR_LIST:
            return self._on_survivor_list(msg)
        return self._on_unmask_request(msg)

    def _size_cap(self, kind: m.Kind) -> int | None:
        """Largest well-formed message of ``kind`` given what we know of the round (None: no bound yet)."""
        if kind is m.Kind.KEY_ROSTER:
            return None  # the roster's size is the server's to choose; its entries are verified one by one
        if kind is m.Kind.SHARE_BUNDLE:
            return _HEAD + 4 + len(self._peers) * (8 + _BOX_LEN)
        n = len(self._roster_ids)
        if kind is m.Kind.SURVIVOR_LIST:
            return _HEAD + 4 + 4 * n
        if kind is m.Kind.UNMASK_REQUEST:
            return _HEAD + 12 + 4 * (len(self._peers) + 1) + (4 + m.SIG_LEN) * n
        return None

    # -- stage 0/1: check-in and AdvertiseKeys -------------------------------------------------------------
    def decide_check_in(self, data: bytes) -> bytes | None:
        """Check the announced round against our policy, flip our own coin with the round's probability p,
        and if it says yes, advertise two X25519 keys (signed with our identity key in active mode).

        The coin is a 64-bit word from ``source`` compared with floor(p 2^64), so P[yes] = p up to 2^-64.
        """
        if self.stage is not ClientStage.IDLE:
            raise ProtocolError(f"client {self.id} in stage {self.stage.name} refuses a ROUND_OPEN message")
        msg = m.decode(data)
        if not isinstance(msg, m.RoundOpen) or msg.sender != m.SERVER or msg.recipient != m.BROADCAST:
            raise ProtocolError(f"client {self.id}: not a round-open broadcast from the server")
        if msg.bits != self.bits or msg.dim != self._x.size:
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
            body = advertise_statement(self.round_id, self.id, self._enc.public, self._mask.public)
            sig = self._identity.sign(signing.LABEL_ADVERTISE_KEYS, body)
        self.stage = ClientStage.KEYS_ADVERTISED
        return m.AdvertiseKeys(self.round_id, self.id, m.SERVER, self._enc.public, self._mask.public, sig).to_bytes()

    # -- stage 2: ShareKeys ----------------------------------------------------------------------------------
    def _check_roster(self, msg: m.KeyRoster, ids: np.ndarray, nbrs: frozenset[int]) -> None:
        """Active mode: graph seed derived from the roster, threshold safe for this roster, and every entry
        we use signed by its owner's registered identity key over this round id."""
        if msg.graph_seed != roster_graph_seed(msg.round_id, msg.ids, msg.enc_pks, msg.mask_pks):
            raise ProtocolError(f"client {self.id}: graph seed is not derived from the roster")
        full = self._k is None or self._k >= len(msg.ids) - 1
        holders = len(msg.ids) if full else self._k + 1
        need = min_threshold(holders, neighbours=None if full else self._k, security="active")
        if self._t < need:
            raise ProtocolError(
                f"client {self.id}: threshold {self._t} is unsafe against an active server with {holders} share "
                f"holders per secret (need >= {need})"
            )
        for v in sorted(nbrs):
            e = msg.entry(int(np.searchsorted(ids, v)))
            try:
                self._registry.verify(v, signing.LABEL_ADVERTISE_KEYS, advertise_statement(msg.round_id, v, e.enc_pk, e.mask_pk), e.signature)
            except AuthenticationError:
                raise ProtocolError(f"client {self.id}: roster entry of client {v} fails signature verification") from None
        # A low-order key that slipped through makes the key agreement below raise AuthenticationError
        # (a ProtocolError): the roster is refused without a separate check per entry.

    def _on_roster(self, msg: m.KeyRoster) -> bytes:
        ids = np.asarray(msg.ids, dtype=np.int64)
        pos = int(np.searchsorted(ids, self.id))
        if pos >= ids.size or ids[pos] != self.id:
            raise ProtocolError(f"client {self.id}: not in the roster")
        me = msg.entry(pos)
        if me.enc_pk != self._enc.public or me.mask_pk != self._mask.public:
            raise ProtocolError(f"client {self.id}: roster carries keys that are not ours")
        if len(msg.ids) < self._t:
            raise ProtocolError(f"client {self.id}: roster has {len(msg.ids)} < threshold {self._t} clients")
        nbrs = neighbours_of(msg.ids, self._k, msg.graph_seed, self.id)
        if self.active:
            self._check_roster(msg, ids, nbrs)
        holders = sorted(nbrs | {self.id})
        if len(holders) < self._t:
            raise ProtocolError(f"client {self.id}: {len(holders)} share holders < threshold {self._t}")
        points = holder_points(holders)
        self_seed = masking.new_self_mask_seed(source=self._src)
        shares = shamir.share(
            [self._mask.private, self_seed], threshold=self._t, points=[points[v] for v in holders], source=self._src
        )
        half = shamir.PIECES_PER_32_BYTES
        peers: dict[int, tuple[bytes, bytes]] = {}
        recipients, boxes = [], []
        for row, v in enumerate(holders):
            if v == self.id:
                own = shares[row]
                continue
            e = msg.entry(int(np.searchsorted(ids, v)))
            ck = masking.channel_key(self._enc, e.enc_pk, round_id=self.round_id, own_id=self.id, peer_id=v)
            pt = m.SharePlaintext(self.id, v, shares[row, :half], shares[row, half:])
            boxes.append(aead.seal(ck, pt.to_bytes(), aead.associated_data(self.round_id, self.id, v), source=self._src))
            recipients.append(v)
            peers[v] = (ck, e.mask_pk)
        commitment = masking.self_mask_commitment(self_seed, round_id=self.round_id, owner=self.id)
        out = m.ShareKeys(self.round_id, self.id, m.SERVER, commitment, tuple(recipients), tuple(boxes)).to_bytes()
        self._self_seed, self._own_share, self._peers = self_seed, own, peers
        self._roster_ids, self._graph_seed = msg.ids, msg.graph_seed
        self.stage = ClientStage.SHARES_SENT
        return out

    # -- stage 3: MaskedInputCollection ----------------------------------------------------------------------
    def _on_bundle(self, msg: m.ShareBundle) -> bytes:
        unknown = [v for v in msg.senders if v not in self._peers]
        if unknown:
            raise ProtocolError(f"client {self.id}: boxes from clients that are not our neighbours: {unknown[:5]}")
        if len(msg.senders) + 1 < self._t:
            raise ProtocolError(f"client {self.id}: only {len(msg.senders) + 1} share holders left < threshold")
        pairwise = []
        for v in msg.senders:
            seed = masking.pairwise_seed(self._mask, self._peers[v][1], round_id=self.round_id, own_id=self.id, peer_id=v)
            pairwise.append((seed, masking.mask_sign(self.id, v)))
        y = masking.mask_input(self._x, bits=self.bits, self_seed=self._self_seed, pairwise=pairwise)
        self._boxes = dict(zip(msg.senders, msg.boxes))
        self.stage = ClientStage.MASKED_INPUT_SENT
        return m.MaskedInput(self.round_id, self.id, m.SERVER, self.bits, y).to_bytes()

    # -- stage 4 (active): ConsistencyCheck --------------------------------------------------------------------
    def _on_survivor_list(self, msg: m.SurvivorList) -> bytes:
        alive = frozenset(msg.survivors)
        if self.id not in alive:
            raise ProtocolError(f"client {self.id}: survivor list does not include us")
        if not alive <= frozenset(self._roster_ids):
            raise ProtocolError(f"client {self.id}: survivor list names clients outside the roster")
        if len(alive) < self._t:
            raise ProtocolError(f"client {self.id}: {len(alive)} survivors < threshold {self._t}; refusing to sign")
        statement = survivor_statement(self.round_id, msg.survivors)
        sig = self._identity.sign(signing.LABEL_SURVIVOR_SET, statement)
        if self._k is not None and self._k < len(self._roster_ids) - 1:
            # SecAgg+: only survivors among the holders of the secrets we hold shares of (us and the
            # neighbours whose boxes we hold) can matter later; keeping all of U3 would cost O(n) per client.
            known = sorted(set(self._boxes) | {self.id})
            nb = neighbourhoods_for(self._roster_ids, self._k, self._graph_seed, known)
            alive &= frozenset(known).union(*nb.values())
        self._survivors, self._statement = alive, statement
        self.stage = ClientStage.SURVIVORS_SIGNED
        return m.SurvivorSignature(self.round_id, self.id, m.SERVER, sig).to_bytes()

    def _check_signatures(self, msg: m.UnmaskRequest, known: set[int]) -> None:
        """Active mode: every forwarded signature is valid on the set we signed, and each client whose
        share we would reveal has at least t signers among its own share holders."""
        signers = set()
        for v, sig in zip(msg.signers, msg.signatures):
            if v not in self._survivors:
                raise ProtocolError(
                    f"client {self.id}: signature from {v}, who is not in the survivor set or holds no share of a "
                    "secret we hold a share of"
                )
            try:
                self._registry.verify(v, signing.LABEL_SURVIVOR_SET, self._statement, sig.tobytes())
            except AuthenticationError:
                raise ProtocolError(f"client {self.id}: survivor-set signature of client {v} is invalid") from None
            signers.add(v)
        nb = neighbourhoods_for(self._roster_ids, self._k, self._graph_seed, sorted(known))
        short = [v for v in sorted(known) if len(signers & (nb[v] | {v})) < self._t]
        if short:
            raise ProtocolError(
                f"client {self.id}: fewer than threshold {self._t} survivor-set signatures from the share holders "
                f"of clients {short[:5]}; refusing to unmask"
            )

    # -- stage 5: Unmasking ----------------------------------------------------------------------------------
    def _on_unmask_request(self, msg: m.UnmaskRequest) -> bytes:
        alive, gone = set(msg.survivors), set(msg.dropped)
        if alive & gone:
            raise ProtocolError(f"client {self.id}: clients listed as both dropped and surviving: {sorted(alive & gone)[:5]}")
        if self.id not in alive:
            raise ProtocolError(f"client {self.id}: request does not list us as a survivor")
        known = set(self._boxes) | {self.id}
        if alive | gone != known:
            raise ProtocolError(f"client {self.id}: request must classify exactly the clients that shared keys with us")
        if len(alive) < self._t:
            raise ProtocolError(f"client {self.id}: {len(alive)} survivors < threshold {self._t}; refusing to unmask")
        if self.active:
            if alive != known & self._survivors:
                raise ProtocolError(f"client {self.id}: unmask request contradicts the survivor set we signed")
            self._check_signatures(msg, known)
        half = shamir.PIECES_PER_32_BYTES
        self_owners, self_rows, key_owners, key_rows, failed = [self.id], [self._own_share[half:]], [], [], []
        for v in sorted(known - {self.id}):
            ck = self._peers[v][0]
            try:
                pt = m.SharePlaintext.from_bytes(aead.open_sealed(ck, self._boxes[v], aead.associated_data(self.round_id, v, self.id)))
                if pt.owner != v or pt.holder != self.id:
                    raise AuthenticationError("share box names the wrong parties")
            except (AuthenticationError, ProtocolError):
                failed.append(v)  # reported to the server; never fatal on its own
                continue
            if v in alive:
                self_owners.append(v)
                self_rows.append(pt.self_share)
            else:
                key_owners.append(v)
                key_rows.append(pt.key_share)
        out = m.UnmaskResponse(
            self.round_id, self.id, m.SERVER,
            tuple(self_owners), np.array(self_rows, dtype=np.uint32).reshape(-1, half),
            tuple(key_owners), np.array(key_rows, dtype=np.uint32).reshape(-1, half),
            tuple(failed),
        ).to_bytes()
        self.stage = ClientStage.DONE
        return out
