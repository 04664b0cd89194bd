"""The client role of the secure-aggregation round (Bonawitz et al. 2017, Fig. 4, semi-honest), as a state machine.

Every incoming message is checked in this order before any state changes: stage/kind pair allowed
(:data:`protocols.stages.CLIENT_TRANSITIONS`), well-formed bytes, round id, sender (the server) and
recipient (us, or a broadcast). Refusals raise :class:`ProtocolError` and leave the client unchanged.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from protocols import messages as m
from protocols.graph import neighbours_of
from protocols.stages import CLIENT_TRANSITIONS, ClientStage
from secagg_dp.crypto import aead, masking, shamir
from secagg_dp.crypto.keys import KeyPair, generate_keypair
from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AuthenticationError, ParameterError, ProtocolError
from secagg_dp._validate import check_int
from secagg_dp.zq import check_bits, check_residues

__all__ = ["SecAggClient"]


class SecAggClient:
    """One honest client holding the encoded vector ``x`` in Z_{2^bits}.

    ``source`` supplies keys, the self-mask seed, Shamir coefficients, AEAD nonces and the check-in coin
    (``None``: ``os.urandom``; a :class:`~secagg_dp.crypto.SeededRandom` only for reproducible simulation).
    """

    def __init__(self, client_id: int, x: np.ndarray, *, bits: int, source: RandomSource | None = None) -> None:
        self.id = check_int("client_id", client_id, lo=0, hi=m.MAX_CLIENT_ID)
        self.bits = check_bits(bits)
        arr = check_residues("x", x, self.bits)
        if arr.ndim != 1:
            raise ParameterError(f"Argument 'x' must be 1-D, not shape {arr.shape}.")
        self._x = np.array(arr, dtype=np.uint64, copy=True)
        self._src = resolve_source(source)
        self.stage = ClientStage.IDLE
        self.round_id: bytes | None = None

    def __repr__(self) -> str:
        return f"SecAggClient(id={self.id}, stage={self.stage.name}, dim={self._x.size})"

    # -- dispatch ------------------------------------------------------------------------------------------
    def receive(self, data: bytes) -> bytes | None:
        """Handle one serialised message from the server; returns the reply (or None if we declined)."""
        kind = m.peek_kind(data)
        if (self.stage, kind) not in CLIENT_TRANSITIONS:
            raise ProtocolError(f"client {self.id} in stage {self.stage.name} refuses a {kind.name} message")
        if kind is m.Kind.ROUND_OPEN:
            return self.decide_check_in(data)
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
        return self._on_unmask_request(msg)

    # -- stage 0/1: check-in and AdvertiseKeys -------------------------------------------------------------
    def decide_check_in(self, data: bytes) -> bytes | None:
        """Flip our own coin with the round's probability p; if it says yes, advertise two X25519 keys.

        The coin is a 64-bit word from ``source`` compared with floor(p 2^64), so P[yes] = p up to 2^-64.
        """
        if self.stage is not ClientStage.IDLE:
            raise ProtocolError(f"client {self.id} in stage {self.stage.name} refuses a ROUND_OPEN message")
        msg = m.decode(data)
        if not isinstance(msg, m.RoundOpen) or msg.sender != m.SERVER or msg.recipient != m.BROADCAST:
            raise ProtocolError(f"client {self.id}: not a round-open broadcast from the server")
        if msg.bits != self.bits or msg.dim != self._x.size:
            raise ProtocolError(f"client {self.id}: round expects {msg.dim} values mod 2^{msg.bits}")
        coin = int.from_bytes(self._src.bytes(8), "big")
        if coin >= int(Fraction(msg.p) * (1 << 64)):
            self.stage = ClientStage.DECLINED
            return None
        self._enc: KeyPair = generate_keypair(source=self._src)
        self._mask: KeyPair = generate_keypair(source=self._src)
        self.round_id, self._t, self._k = msg.round_id, msg.threshold, msg.neighbours or None
        self.stage = ClientStage.KEYS_ADVERTISED
        return m.AdvertiseKeys(self.round_id, self.id, m.SERVER, self._enc.public, self._mask.public).to_bytes()

    # -- stage 2: ShareKeys ----------------------------------------------------------------------------------
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
        holders = np.asarray(sorted(nbrs | {self.id}), dtype=np.int64)
        if holders.size < self._t:
            raise ProtocolError(f"client {self.id}: {holders.size} share holders < threshold {self._t}")
        hpos = np.searchsorted(ids, holders)
        self_seed = masking.new_self_mask_seed(source=self._src)
        shares = shamir.share([self._mask.private, self_seed], threshold=self._t, points=hpos + 1, source=self._src)
        half = shamir.PIECES_PER_32_BYTES
        peers: dict[int, tuple[bytes, bytes, int]] = {}
        recipients, boxes = [], []
        for row, (v, pv) in enumerate(zip(holders.tolist(), hpos.tolist())):
            if v == self.id:
                own = shares[row]
                continue
            e = msg.entry(pv)
            ck = masking.channel_key(self._enc, e.enc_pk, round_id=self.round_id, own_id=self.id, peer_id=v)
            pt = m.SharePlaintext(self.id, v, shares[row, :half], shares[row, half:])
            boxes.append(aead.seal(ck, pt.to_bytes(), aead.associated_data(self.round_id, self.id, v), source=self._src))
            recipients.append(v)
            peers[v] = (ck, e.mask_pk, pv + 1)
        commitment = masking.self_mask_commitment(self_seed, round_id=self.round_id, owner=self.id)
        out = m.ShareKeys(self.round_id, self.id, m.SERVER, commitment, tuple(recipients), tuple(boxes)).to_bytes()
        self._self_seed, self._own_share, self._peers = self_seed, own, peers
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

    # -- stage 4: Unmasking ----------------------------------------------------------------------------------
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
