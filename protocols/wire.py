"""Wire format shared by every message of the round: header, field checks, packing and the bounded reader.

Every message starts with a 28-byte header: magic ``b"SA"``, version 2, kind (1 byte), round id (16 bytes),
sender and recipient (big-endian uint32; the server is ``SERVER``, a broadcast goes to ``BROADCAST``).
The message classes live in :mod:`protocols.messages`; this module holds what they share, so that each
check (ids, lengths, GF(p) elements) is written once.
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
    "HEADER_LEN",
    "KEY_LEN",
    "SIG_LEN",
    "SHARE_BYTES",
    "SECURITY_CODES",
    "Kind",
    "Header",
    "Reader",
    "peek_kind",
    "parse_header",
    "check_id",
    "check_ids",
    "check_bytes",
    "check_sig_rows",
    "check_shares",
    "pack_boxes",
    "pack_ids",
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
HEADER_LEN = _HEADER.size
KEY_LEN = _KEY
SHARE_BYTES = _SHARE_BYTES


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


def check_id(name: str, v: int, *, allow_server: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ProtocolError(f"field '{name}' must be an integer id")
    if not (0 <= v <= MAX_CLIENT_ID or (allow_server and v in (SERVER, BROADCAST))):
        raise ProtocolError(f"field '{name}' is not a valid party id: {v}")


def check_ids(name: str, ids: tuple[int, ...]) -> None:
    if not isinstance(ids, tuple):
        raise ProtocolError(f"field '{name}' must be a tuple of client ids")
    if len(ids) > 16:  # vectorised check for long lists (rosters, bundles)
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu" or arr.ndim != 1 or int(arr.min()) < 0 or int(arr.max()) > MAX_CLIENT_ID:
            raise ProtocolError(f"field '{name}' holds an invalid client id")
    else:
        for v in ids:
            check_id(name, v)
    if len(set(ids)) != len(ids):
        raise ProtocolError(f"field '{name}' lists a client id twice")


def check_bytes(name: str, v: bytes, n: int) -> None:
    if not isinstance(v, bytes) or len(v) != n:
        raise ProtocolError(f"field '{name}' must be {n} bytes")


def check_sig_rows(name: str, a: np.ndarray, rows: int) -> None:
    if not (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.shape == (rows, SIG_LEN)):
        raise ProtocolError(f"field '{name}' must be a ({rows}, {SIG_LEN}) uint8 array")
    a.flags.writeable = False


def check_shares(name: str, arr: np.ndarray, rows: int) -> None:
    if (
        not isinstance(arr, np.ndarray)
        or arr.dtype != np.uint32
        or arr.shape != (rows, PIECES_PER_32_BYTES)
        or (arr.size and int(arr.max()) >= PRIME)
    ):
        raise ProtocolError(f"field '{name}' must be a ({rows}, {PIECES_PER_32_BYTES}) uint32 array of GF(p) elements")


@dataclass(frozen=True)
class Header:
    round_id: bytes
    sender: int
    recipient: int

    def __post_init__(self) -> None:
        check_bytes("round_id", self.round_id, ROUND_ID_LEN)
        check_id("sender", self.sender, allow_server=True)
        check_id("recipient", self.recipient, allow_server=True)

    def _head(self) -> bytes:
        return _HEADER.pack(MAGIC, VERSION, int(self.KIND), self.round_id, self.sender, self.recipient)


def pack_boxes(ids: tuple[int, ...], boxes: tuple[bytes, ...]) -> bytes:
    parts = [struct.pack(">I", len(ids))]
    for i, b in zip(ids, boxes):
        parts.append(struct.pack(">II", i, len(b)))
        parts.append(b)
    return b"".join(parts)


def pack_ids(ids: tuple[int, ...]) -> bytes:
    return struct.pack(f">I{len(ids)}I", len(ids), *ids)


class Reader:
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

    def id_array(self) -> np.ndarray:
        """A count-prefixed list of uint32 ids as an int64 array (no per-id Python objects)."""
        n = self.u32()
        return np.frombuffer(self.take(4 * n), dtype=">u4").astype(np.int64)

    def sigs(self, rows: int) -> np.ndarray:
        return np.frombuffer(self.take(rows * SIG_LEN), dtype=np.uint8).reshape(rows, SIG_LEN).copy()

    def shares(self, rows: int) -> np.ndarray:
        return (
            np.frombuffer(self.take(rows * _SHARE_BYTES), dtype=">u4")
            .astype(np.uint32)
            .reshape(rows, PIECES_PER_32_BYTES)
        )

    def boxes(self) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
        n = self.u32()
        if n > len(self.data):  # cheap sanity bound before looping
            raise ProtocolError("box count exceeds message size")
        regular = self._regular_boxes(n)
        if regular is not None:
            return regular
        ids, boxes = [], []
        for _ in range(n):
            i, ln = struct.unpack(">II", self.take(8))
            ids.append(i)
            boxes.append(self.take(ln))
        return tuple(ids), tuple(boxes)

    def _regular_boxes(self, n: int) -> tuple[tuple[int, ...], tuple[bytes, ...]] | None:
        """The common case of :meth:`boxes`, parsed with arrays: n boxes of one length L filling exactly the
        next n (8 + L) bytes (the caller then checks for trailing bytes as usual). None: parse one by one."""
        data, pos = self.data, self.pos
        if n == 0 or pos + 8 > len(data):
            return None
        ln = struct.unpack_from(">I", data, pos + 4)[0]
        step = 8 + ln
        if pos + n * step > len(data):
            return None
        heads = np.ndarray((n, 2), dtype=">u4", buffer=data, offset=pos, strides=(step, 4))
        if not bool((heads[:, 1] == ln).all()):
            return None
        starts = range(pos + 8, pos + 8 + n * step, step)  # exactly n starts, also for empty boxes
        self.pos = pos + n * step
        return tuple(heads[:, 0].tolist()), tuple(data[o : o + ln] for o in starts)

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


def parse_header(data: bytes) -> tuple[Kind, bytes, int, int]:
    """Kind, round id, sender and recipient of a serialised message (magic and version checked)."""
    kind = peek_kind(data)
    _, _, _, rid, sender, recipient = _HEADER.unpack_from(data)
    return kind, rid, sender, recipient
