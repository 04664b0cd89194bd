"""Wire messages of the secure-aggregation round: frozen dataclasses with explicit byte serialisation.

Every message starts with a 28-byte header: magic ``b"SA"``, version 2, kind (1 byte), round id (16 bytes),
sender and recipient (big-endian uint32; the server is ``SERVER``, a broadcast goes to ``BROADCAST``).
Bodies use big-endian fixed-width fields and explicit counts; :func:`decode` checks every length and
refuses trailing bytes, so malformed input raises :class:`ProtocolError` and nothing else.
Secrets never travel in the clear except Shamir shares in :class:`UnmaskResponse` (as in the paper).
Version 2 adds Ed25519 signatures (advertised keys, survivor set) and the consistency round's two kinds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from secagg_dp.crypto.shamir import PIECES_PER_32_BYTES, PRIME
from secagg_dp.errors import ProtocolError

__all__ = [
    "MAGIC",
    "VERSION",
    "ROUND_ID_LEN",
    "SERVER",
    "BROADCAST",
    "MAX_CLIENT_ID",
    "Kind",
    "RoundOpen",
    "AdvertiseKeys",
    "KeyRoster",
    "RosterEntry",
    "ShareKeys",
    "ShareBundle",
    "MaskedInput",
    "SurvivorList",
    "SurvivorSignature",
    "UnmaskRequest",
    "UnmaskResponse",
    "SharePlaintext",
    "Message",
    "decode",
    "peek_kind",
    "SECURITY_CODES",
    "SIG_LEN",
]

MAGIC = b"SA"
VERSION = 2
ROUND_ID_LEN = 16
SERVER = 0xFFFFFFFF
BROADCAST = 0xFFFFFFFE
MAX_CLIENT_ID = 0xFFFFFFFD
_HEADER = struct.Struct(">2sBB16sII")
_KEY = 32
SIG_LEN = 64
SECURITY_CODES = {"semi-honest": 0, "active": 1}
_SHARE_BYTES = 4 * PIECES_PER_32_BYTES  # one share of a 32-byte secret: 16 uint32 field elements


class Kind(IntEnum):
    """Message kinds; the client-bound ones are ROUND_OPEN, KEY_ROSTER, SHARE_BUNDLE, SURVIVOR_LIST and
    UNMASK_REQUEST. SURVIVOR_LIST / SURVIVOR_SIGNATURE form the consistency round (active mode only)."""

    ROUND_OPEN = 1
    ADVERTISE_KEYS = 2
    KEY_ROSTER = 3
    SHARE_KEYS = 4
    SHARE_BUNDLE = 5
    MASKED_INPUT = 6
    UNMASK_REQUEST = 7
    UNMASK_RESPONSE = 8
    SURVIVOR_LIST = 9
    SURVIVOR_SIGNATURE = 10


def _check_id(name: str, v: int, *, allow_server: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ProtocolError(f"field '{name}' must be an integer id")
    if not (0 <= v <= MAX_CLIENT_ID or (allow_server and v in (SERVER, BROADCAST))):
        raise ProtocolError(f"field '{name}' is not a valid party id: {v}")


def _check_ids(name: str, ids: tuple[int, ...]) -> None:
    if not isinstance(ids, tuple):
        raise ProtocolError(f"field '{name}' must be a tuple of client ids")
    if len(ids) > 16:  # vectorised check for long lists (rosters, bundles)
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu" or arr.ndim != 1 or int(arr.min()) < 0 or int(arr.max()) > MAX_CLIENT_ID:
            raise ProtocolError(f"field '{name}' holds an invalid client id")
    else:
        for v in ids:
            _check_id(name, v)
    if len(set(ids)) != len(ids):
        raise ProtocolError(f"field '{name}' lists a client id twice")


def _check_bytes(name: str, v: bytes, n: int) -> None:
    if not isinstance(v, bytes) or len(v) != n:
        raise ProtocolError(f"field '{name}' must be {n} bytes")


def _check_sig_rows(name: str, a: np.ndarray, rows: int) -> None:
    if not (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.shape == (rows, SIG_LEN)):
        raise ProtocolError(f"field '{name}' must be a ({rows}, {SIG_LEN}) uint8 array")
    a.flags.writeable = False


def _check_shares(name: str, arr: np.ndarray, rows: int) -> None:
    if (
        not isinstance(arr, np.ndarray)
        or arr.dtype != np.uint32
        or arr.shape != (rows, PIECES_PER_32_BYTES)
        or (arr.size and int(arr.max()) >= PRIME)
    ):
        raise ProtocolError(f"field '{name}' must be a ({rows}, {PIECES_PER_32_BYTES}) uint32 array of GF(p) elements")


@dataclass(frozen=True)
class _Header:
    round_id: bytes
    sender: int
    recipient: int

    def __post_init__(self) -> None:
        _check_bytes("round_id", self.round_id, ROUND_ID_LEN)
        _check_id("sender", self.sender, allow_server=True)
        _check_id("recipient", self.recipient, allow_server=True)

    def _head(self) -> bytes:
        return _HEADER.pack(MAGIC, VERSION, int(self.KIND), self.round_id, self.sender, self.recipient)


@dataclass(frozen=True)
class RoundOpen(_Header):
    """Server -> everyone: round r is open; take part with your own probability ``p``."""

    KIND = Kind.ROUND_OPEN
    p: float
    bits: int
    dim: int
    threshold: int
    neighbours: int  # 0 = full graph
    security: int = SECURITY_CODES["active"]  # 0 = semi-honest, 1 = active (see SECURITY_CODES)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.p, float) and 0.0 <= self.p <= 1.0):
            raise ProtocolError("field 'p' must be a float in [0, 1]")
        if not (1 <= self.bits <= 62 and 0 <= self.dim < 1 << 32 and 1 <= self.threshold and 0 <= self.neighbours < 1 << 32):
            raise ProtocolError("round parameters out of range")
        if self.security not in SECURITY_CODES.values():
            raise ProtocolError(f"field 'security' must be one of {sorted(SECURITY_CODES.values())}")

    def to_bytes(self) -> bytes:
        return self._head() + struct.pack(
            ">dBIIIB", self.p, self.bits, self.dim, self.threshold, self.neighbours, self.security
        )


@dataclass(frozen=True)
class AdvertiseKeys(_Header):
    """Client -> server: check-in with two X25519 public keys (AEAD channel, mask agreement) and the
    sender's Ed25519 signature on them (:func:`protocols.pki.advertise_statement`; zeros in semi-honest mode)."""

    KIND = Kind.ADVERTISE_KEYS
    enc_pk: bytes
    mask_pk: bytes
    signature: bytes = bytes(SIG_LEN)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bytes("enc_pk", self.enc_pk, _KEY)
        _check_bytes("mask_pk", self.mask_pk, _KEY)
        _check_bytes("signature", self.signature, SIG_LEN)

    def to_bytes(self) -> bytes:
        return self._head() + self.enc_pk + self.mask_pk + self.signature


@dataclass(frozen=True)
class RosterEntry:
    client: int
    enc_pk: bytes
    mask_pk: bytes
    signature: bytes


_ROSTER_DT = np.dtype([("id", ">u4"), ("enc", "u1", (_KEY,)), ("mask", "u1", (_KEY,)), ("sig", "u1", (SIG_LEN,))])


@dataclass(frozen=True)
class KeyRoster(_Header):
    """Server -> all checked-in clients: everyone's public keys (sorted by id), their signatures and the
    graph seed.

    ``enc_pks`` and ``mask_pks`` are read-only (n, 32) uint8 arrays and ``signatures`` a read-only
    (n, 64) array, row i belonging to ``ids[i]``.
    """

    KIND = Kind.KEY_ROSTER
    graph_seed: bytes
    ids: tuple[int, ...]
    enc_pks: np.ndarray
    mask_pks: np.ndarray
    signatures: np.ndarray

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bytes("graph_seed", self.graph_seed, 32)
        _check_ids("ids", self.ids)
        if list(self.ids) != sorted(self.ids):
            raise ProtocolError("field 'ids' must be sorted")
        for name in ("enc_pks", "mask_pks"):
            a = getattr(self, name)
            if not (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.shape == (len(self.ids), _KEY)):
                raise ProtocolError(f"field '{name}' must be a (n, 32) uint8 array")
            a.flags.writeable = False
        _check_sig_rows("signatures", self.signatures, len(self.ids))

    def __repr__(self) -> str:
        return f"KeyRoster(round_id={self.round_id.hex()}, ids={self.ids})"

    def to_bytes(self) -> bytes:
        arr = np.empty(len(self.ids), dtype=_ROSTER_DT)
        arr["id"] = self.ids
        arr["enc"] = self.enc_pks
        arr["mask"] = self.mask_pks
        arr["sig"] = self.signatures
        return self._head() + self.graph_seed + struct.pack(">I", len(self.ids)) + arr.tobytes()

    def entry(self, index: int) -> RosterEntry:
        """The roster row at position ``index`` (not client id)."""
        return RosterEntry(
            self.ids[index], self.enc_pks[index].tobytes(), self.mask_pks[index].tobytes(), self.signatures[index].tobytes()
        )


def _pack_boxes(ids: tuple[int, ...], boxes: tuple[bytes, ...]) -> bytes:
    parts = [struct.pack(">I", len(ids))]
    for i, b in zip(ids, boxes):
        parts.append(struct.pack(">II", i, len(b)))
        parts.append(b)
    return b"".join(parts)


@dataclass(frozen=True)
class ShareKeys(_Header):
    """Client -> server: a commitment to b_u and one AEAD box of shares per other share holder."""

    KIND = Kind.SHARE_KEYS
    commitment: bytes
    recipients: tuple[int, ...]
    boxes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bytes("commitment", self.commitment, 32)
        _check_ids("recipients", self.recipients)
        if len(self.recipients) != len(self.boxes) or not all(isinstance(b, bytes) for b in self.boxes):
            raise ProtocolError("recipients and boxes differ in length")

    def to_bytes(self) -> bytes:
        return self._head() + self.commitment + _pack_boxes(self.recipients, self.boxes)


@dataclass(frozen=True)
class ShareBundle(_Header):
    """Server -> one client: the boxes addressed to it, with their senders."""

    KIND = Kind.SHARE_BUNDLE
    senders: tuple[int, ...]
    boxes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ids("senders", self.senders)
        if len(self.senders) != len(self.boxes) or not all(isinstance(b, bytes) for b in self.boxes):
            raise ProtocolError("senders and boxes differ in length")

    def to_bytes(self) -> bytes:
        return self._head() + _pack_boxes(self.senders, self.boxes)


@dataclass(frozen=True)
class MaskedInput(_Header):
    """Client -> server: y_u, little-endian uint64 residues (shown in repr only by length)."""

    KIND = Kind.MASKED_INPUT
    bits: int
    y: np.ndarray

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.y, np.ndarray) and self.y.dtype == np.uint64 and self.y.ndim == 1):
            raise ProtocolError("field 'y' must be a 1-D uint64 array")
        if not 1 <= self.bits <= 62:
            raise ProtocolError("field 'bits' out of range")
        if self.y.size and int(self.y.max()) >> self.bits:
            raise ProtocolError("masked input holds a value outside Z_q")

    def __repr__(self) -> str:
        return f"MaskedInput(sender={self.sender}, bits={self.bits}, dim={self.y.size})"

    def to_bytes(self) -> bytes:
        return self._head() + struct.pack(">BI", self.bits, self.y.size) + self.y.astype("<u8", copy=False).tobytes()


def _pack_ids(ids: tuple[int, ...]) -> bytes:
    return struct.pack(f">I{len(ids)}I", len(ids), *ids)


@dataclass(frozen=True)
class SurvivorList(_Header):
    """Server -> each client of U3 (active mode): the survivor set U3, sorted, for the client to sign."""

    KIND = Kind.SURVIVOR_LIST
    survivors: tuple[int, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ids("survivors", self.survivors)
        if list(self.survivors) != sorted(self.survivors):
            raise ProtocolError("field 'survivors' must be sorted")

    def to_bytes(self) -> bytes:
        return self._head() + _pack_ids(self.survivors)


@dataclass(frozen=True)
class SurvivorSignature(_Header):
    """Client -> server (active mode): its signature on the survivor set it was sent
    (:func:`protocols.pki.survivor_statement`)."""

    KIND = Kind.SURVIVOR_SIGNATURE
    signature: bytes

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bytes("signature", self.signature, SIG_LEN)

    def to_bytes(self) -> bytes:
        return self._head() + self.signature


@dataclass(frozen=True)
class UnmaskRequest(_Header):
    """Server -> one survivor: who sent a masked input (survivors) and who dropped after sharing keys; in
    active mode also the survivor-set signatures the client needs (``signers[i]`` made ``signatures[i]``)."""

    KIND = Kind.UNMASK_REQUEST
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    signers: tuple[int, ...] = ()
    signatures: np.ndarray = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ids("survivors", self.survivors)
        _check_ids("dropped", self.dropped)
        _check_ids("signers", self.signers)
        if self.signatures is None:
            object.__setattr__(self, "signatures", np.zeros((0, SIG_LEN), dtype=np.uint8))
        _check_sig_rows("signatures", self.signatures, len(self.signers))

    def __repr__(self) -> str:
        return (f"UnmaskRequest(sender={self.sender}, recipient={self.recipient}, survivors={len(self.survivors)}, "
                f"dropped={len(self.dropped)}, signers={len(self.signers)})")

    def to_bytes(self) -> bytes:
        return (
            self._head() + _pack_ids(self.survivors) + _pack_ids(self.dropped) + _pack_ids(self.signers)
            + self.signatures.tobytes()
        )


@dataclass(frozen=True)
class UnmaskResponse(_Header):
    """Survivor -> server: b-shares of survivors, key-shares of dropped clients, and owners whose box failed."""

    KIND = Kind.UNMASK_RESPONSE
    self_owners: tuple[int, ...]
    self_shares: np.ndarray = None  # (len(self_owners), 16) uint32
    key_owners: tuple[int, ...] = ()
    key_shares: np.ndarray = None
    failed: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_ids("self_owners", self.self_owners)
        _check_ids("key_owners", self.key_owners)
        _check_ids("failed", self.failed)
        _check_shares("self_shares", self.self_shares, len(self.self_owners))
        _check_shares("key_shares", self.key_shares, len(self.key_owners))
        if set(self.self_owners) & set(self.key_owners):
            raise ProtocolError("a response may not carry both shares for one client")

    def __repr__(self) -> str:
        return (
            f"UnmaskResponse(sender={self.sender}, self_owners={self.self_owners}, "
            f"key_owners={self.key_owners}, failed={self.failed}, shares=<hidden>)"
        )

    def to_bytes(self) -> bytes:
        def block(owners: tuple[int, ...], shares: np.ndarray) -> bytes:
            return struct.pack(f">I{len(owners)}I", len(owners), *owners) + shares.astype(">u4").tobytes()

        return (
            self._head()
            + block(self.self_owners, self.self_shares)
            + block(self.key_owners, self.key_shares)
            + struct.pack(f">I{len(self.failed)}I", len(self.failed), *self.failed)
        )


@dataclass(frozen=True)
class SharePlaintext:
    """Inside an AEAD box from ``owner`` to ``holder``: its shares of sk_u (mask key) and of b_u."""

    owner: int
    holder: int
    key_share: np.ndarray = None
    self_share: np.ndarray = None
    LEN = 8 + 2 * _SHARE_BYTES

    def __post_init__(self) -> None:
        _check_id("owner", self.owner)
        _check_id("holder", self.holder)
        for name in ("key_share", "self_share"):
            a = getattr(self, name)
            if not (type(a) is np.ndarray and a.dtype == np.uint32 and a.shape == (PIECES_PER_32_BYTES,) and int(a.max()) < PRIME):
                raise ProtocolError(f"field '{name}' must be {PIECES_PER_32_BYTES} uint32 elements of GF(p)")

    def __repr__(self) -> str:
        return f"SharePlaintext(owner={self.owner}, holder={self.holder}, shares=<hidden>)"

    def to_bytes(self) -> bytes:
        return struct.pack(">II", self.owner, self.holder) + self.key_share.astype(">u4").tobytes() + self.self_share.astype(">u4").tobytes()

    @classmethod
    def from_bytes(cls, data: bytes) -> SharePlaintext:
        if len(data) != cls.LEN:
            raise ProtocolError("share plaintext has the wrong length")
        owner, holder = struct.unpack_from(">II", data)
        arr = np.frombuffer(data, dtype=">u4", offset=8).astype(np.uint32)
        return cls(owner, holder, arr[:PIECES_PER_32_BYTES].copy(), arr[PIECES_PER_32_BYTES:].copy())


Message = (
    RoundOpen | AdvertiseKeys | KeyRoster | ShareKeys | ShareBundle | MaskedInput | SurvivorList | SurvivorSignature
    | UnmaskRequest | UnmaskResponse
)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("message truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def ids(self) -> tuple[int, ...]:
        n = self.u32()
        return tuple(np.frombuffer(self.take(4 * n), dtype=">u4").tolist())

    def sigs(self, rows: int) -> np.ndarray:
        return np.frombuffer(self.take(rows * SIG_LEN), dtype=np.uint8).reshape(rows, SIG_LEN).copy()

    def shares(self, rows: int) -> np.ndarray:
        return np.frombuffer(self.take(rows * _SHARE_BYTES), dtype=">u4").astype(np.uint32).reshape(rows, PIECES_PER_32_BYTES)

    def boxes(self) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
        n = self.u32()
        if n > len(self.data):  # cheap sanity bound before looping
            raise ProtocolError("box count exceeds message size")
        ids, boxes = [], []
        for _ in range(n):
            i, ln = struct.unpack(">II", self.take(8))
            ids.append(i)
            boxes.append(self.take(ln))
        return tuple(ids), tuple(boxes)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolError("trailing bytes after message")


def peek_kind(data: bytes) -> Kind:
    """The kind of a serialised message after checking magic and version (no body parsing)."""
    if not isinstance(data, (bytes, bytearray)) or len(data) < _HEADER.size:
        raise ProtocolError("message shorter than its header")
    magic, version, kind = struct.unpack_from(">2sBB", data)
    if magic != MAGIC or version != VERSION:
        raise ProtocolError("bad magic or version")
    try:
        return Kind(kind)
    except ValueError:
        raise ProtocolError(f"unknown message kind {kind}") from None


def decode(data: bytes) -> Message:
    """Parse one serialised message; any malformation raises ProtocolError."""
    kind = peek_kind(data)
    data = bytes(data)
    _, _, _, rid, sender, recipient = _HEADER.unpack_from(data)
    r = _Reader(data, _HEADER.size)
    h = (rid, sender, recipient)
    if kind is Kind.ROUND_OPEN:
        p, bits, dim, t, k, sec = struct.unpack(">dBIIIB", r.take(22))
        msg: Message = RoundOpen(*h, p, bits, dim, t, k, sec)
    elif kind is Kind.ADVERTISE_KEYS:
        msg = AdvertiseKeys(*h, r.take(_KEY), r.take(_KEY), r.take(SIG_LEN))
    elif kind is Kind.KEY_ROSTER:
        seed = r.take(32)
        n = r.u32()
        arr = np.frombuffer(r.take(n * _ROSTER_DT.itemsize), dtype=_ROSTER_DT)
        msg = KeyRoster(*h, seed, tuple(arr["id"].tolist()), np.array(arr["enc"]), np.array(arr["mask"]), np.array(arr["sig"]))
    elif kind is Kind.SHARE_KEYS:
        com = r.take(32)
        msg = ShareKeys(*h, com, *r.boxes())
    elif kind is Kind.SHARE_BUNDLE:
        msg = ShareBundle(*h, *r.boxes())
    elif kind is Kind.MASKED_INPUT:
        bits = r.take(1)[0]
        n = r.u32()
        y = np.frombuffer(r.take(8 * n), dtype="<u8").astype(np.uint64)
        msg = MaskedInput(*h, bits, y)
    elif kind is Kind.SURVIVOR_LIST:
        msg = SurvivorList(*h, r.ids())
    elif kind is Kind.SURVIVOR_SIGNATURE:
        msg = SurvivorSignature(*h, r.take(SIG_LEN))
    elif kind is Kind.UNMASK_REQUEST:
        alive, gone, signers = r.ids(), r.ids(), r.ids()
        msg = UnmaskRequest(*h, alive, gone, signers, r.sigs(len(signers)))
    else:
        so = r.ids()
        ss = r.shares(len(so))
        ko = r.ids()
        ks = r.shares(len(ko))
        msg = UnmaskResponse(*h, so, ss, ko, ks, r.ids())
    r.done()
    return msg
