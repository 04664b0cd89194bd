"""Wire format shared by every message of the round: header, field checks, packing and the bounded reader.

Every message starts with a 28-byte header: magic ``b"SA"``, version 3, kind (1 byte), round id (16 bytes),
sender and recipient (big-endian uint32; the server is ``SERVER``, a broadcast goes to ``BROADCAST``).
The message classes live in :mod:`protocols.messages`; this module holds what they share, so that each
check (ids, lengths, GF(p) elements) is written once.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

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
    "PACK_BLOCK",
    "packed_len",
    "pack_residues",
    "pack_residues_into",
    "unpack_residues",
    "check_packed",
    "execution_round_id",
]

MAGIC = b"SA"
VERSION = 3
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
    KIND: ClassVar[Kind]  # set by each message class

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
    for i, b in zip(ids, boxes, strict=True):
        parts.append(struct.pack(">II", i, len(b)))
        parts.append(b)
    return b"".join(parts)


def pack_ids(ids: tuple[int, ...]) -> bytes:
    return struct.pack(f">I{len(ids)}I", len(ids), *ids)


# -- bit-packed residues ----------------------------------------------------------------------------------------
# A vector of d residues in Z_{2^b} travels as one little-endian bit stream of d b bits: residue i occupies bits
# [i b, (i + 1) b) of the integer sum_i x_i 2^{i b}, written as ceil(d b / 8) little-endian bytes; the padding
# bits of the last byte are zero (a parser refuses anything else, so every vector has exactly one encoding).
# Work is done in blocks of PACK_BLOCK residues, a multiple of 64, so each block starts on a 64-bit word
# boundary and the temporaries stay O(PACK_BLOCK) whatever d is.

PACK_BLOCK = 1 << 15
_U64 = np.dtype("<u8")


def packed_len(count: int, bits: int) -> int:
    """Bytes of ``count`` packed residues of ``bits`` bits: ceil(count bits / 8)."""
    return (count * bits + 7) // 8


@functools.lru_cache(maxsize=64)
def _columns(bits: int) -> list[tuple[int, int, int, int]]:
    """For residue j of a group of 64 (which fills exactly ``bits`` words): (j, word, shift, spill) where the
    residue starts at bit ``shift`` of ``word`` and, if ``spill``, continues in ``word + 1``."""
    return [(j, j * bits >> 6, j * bits & 63, int((j * bits & 63) + bits > 64)) for j in range(64)]


@functools.lru_cache(maxsize=16)
def _layout(n: int, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Where each of ``n`` residues sits in the bit stream (a function of (n, bits) only, so it is computed
    once per vector length): residue i starts at bit p = i bits, in word p // 64 at shift s = p % 64, and
    spills into word p // 64 + 1 when s + bits > 64. Returns (word, shift, 63 - shift, first residue of each
    word, spilling residues); every word but possibly the last holds the start of some residue (bits < 64)."""
    pos = np.arange(n, dtype=np.uint64) * np.uint64(bits)
    word = (pos >> np.uint64(6)).astype(np.intp)
    shift = pos & np.uint64(63)
    firsts = np.flatnonzero(np.concatenate(([True], word[1:] != word[:-1]))) if n else np.zeros(0, np.intp)
    spill = np.flatnonzero(shift + np.uint64(bits) > np.uint64(64))
    for a in (word, shift, firsts, spill):
        a.flags.writeable = False
    return word, shift, np.uint64(63) - shift, firsts, spill


def _pack_words(v: np.ndarray, bits: int) -> np.ndarray:
    """The residues ``v`` (uint64, < 2^bits) as the 64-bit words of their bit stream: word w holds bits
    [64 w, 64 w + 64). Short vectors: each word is the sum (= OR: the bit ranges are disjoint) of its residues'
    low parts v << s plus the spilled high part v >> (64 - s) of the residue straddling into it. Longer ones
    go column by column over groups of 64 residues (exactly ``bits`` words each), which is faster there."""
    n = v.size
    if n <= 4096:
        word, shift, rshift, firsts, spill = _layout(n, bits)
        out = np.zeros((n * bits + 63) // 64 + 1, dtype=np.uint64)
        if n:
            out[word[firsts]] = np.add.reduceat(v << shift, firsts)
            # v >> (64 - s) as (v >> 1) >> (63 - s): both shift counts in [0, 63]
            out[word[spill] + 1] += (v[spill] >> np.uint64(1)) >> rshift[spill]
        return out[:-1]
    groups = -(-n // 64)
    if n % 64:
        v = np.concatenate([v, np.zeros(groups * 64 - n, dtype=np.uint64)])
    g = v.reshape(groups, 64)
    cols = np.zeros((groups, bits), dtype=np.uint64)
    for j, w, sh, spills in _columns(bits):
        col = g[:, j]
        cols[:, w] |= col << np.uint64(sh)
        if spills:
            cols[:, w + 1] |= col >> np.uint64(64 - sh)
    return cols.reshape(-1)[: (n * bits + 63) // 64]


def pack_residues_into(out: bytearray | memoryview, start: int, v: np.ndarray, bits: int) -> None:
    """Write the residues ``v`` (uint64, each < 2^bits) as packed bits into ``out`` from residue index ``start``
    on; ``start`` must be a multiple of 64 (a block boundary), so the block begins on a byte boundary."""
    if start % 64:
        raise ValueError("pack_residues_into: start must be a multiple of 64")
    mv = memoryview(out).cast("B")
    lo = start * bits // 8
    nbytes = packed_len(v.size, bits)
    words = _pack_words(np.ascontiguousarray(v, dtype=np.uint64), bits)
    mv[lo : lo + nbytes] = words.astype(_U64, copy=False).tobytes()[:nbytes]


def pack_residues(v: np.ndarray, bits: int) -> bytes:
    """The residues ``v`` (1-D, each in [0, 2^bits)) as ceil(len(v) bits / 8) bytes of packed bits (see above)."""
    arr = np.asarray(v)
    if arr.ndim != 1 or arr.dtype.kind not in "ui" or not 1 <= bits <= 62:
        raise ProtocolError("pack_residues: need a 1-D integer array and 1 <= bits <= 62")
    if arr.size and (int(arr.min()) < 0 or int(arr.max()) >> bits):
        raise ProtocolError(f"pack_residues: a value is outside Z_(2^{bits})")
    out = bytearray(packed_len(arr.size, bits))
    for i in range(0, arr.size, PACK_BLOCK):
        pack_residues_into(out, i, arr[i : i + PACK_BLOCK].astype(np.uint64, copy=False), bits)
    return bytes(out)


def check_packed(data: bytes | memoryview, count: int, bits: int) -> None:
    """Refuse a packed vector of the wrong length or with a nonzero padding bit (a :class:`ProtocolError`)."""
    want = packed_len(count, bits)
    if len(data) != want:
        raise ProtocolError(f"packed vector has {len(data)} bytes, expected {want} for {count} residues of {bits} bits")
    used = (count * bits) % 8
    if used and data[-1] >> used:
        raise ProtocolError("packed vector has nonzero padding bits")


def unpack_residues(
    data: bytes | memoryview, count: int, bits: int, *, start: int = 0, stop: int | None = None
) -> np.ndarray:
    """Residues ``start:stop`` (default all ``count``) of a packed vector (checked with :func:`check_packed`
    by the caller) as uint64; ``start`` must be a multiple of 64. Unpacked in blocks of :data:`PACK_BLOCK`."""
    stop = count if stop is None else stop
    if start % 64 or not 0 <= start <= stop <= count:
        raise ValueError("unpack_residues: bad range")
    if stop - start <= PACK_BLOCK:
        return _unpack_block(data, bits, start, stop)
    out = np.empty(stop - start, dtype=np.uint64)
    for i in range(start, stop, PACK_BLOCK):
        out[i - start : min(i + PACK_BLOCK, stop) - start] = _unpack_block(data, bits, i, min(i + PACK_BLOCK, stop))
    return out


def _unpack_block(data: bytes | memoryview, bits: int, start: int, stop: int) -> np.ndarray:
    """Residues ``start:stop`` (start a multiple of 64): v = (w[p // 64] >> s | w[p // 64 + 1] << (64 - s))
    mod 2^bits, for all residues at once with the cached layout of :func:`_layout`."""
    n = stop - start
    lo = start * bits // 8
    hi = min(len(data), packed_len(stop, bits))
    nwords = (n * bits + 63) // 64 + 1  # one zero word past the end for the spill term
    buf = np.zeros(nwords * 8, dtype=np.uint8)
    buf[: hi - lo] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
    words = buf.view(_U64)
    word, shift, rshift, _, _ = _layout(n, bits)
    v: np.ndarray = words[word] >> shift
    v |= (words[word + 1] << np.uint64(1)) << rshift  # w << (64 - s) as (w << 1) << (63 - s); 0 when s = 0
    v &= np.uint64((1 << bits) - 1)
    return v


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
        return int(struct.unpack(">I", self.take(4))[0])

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


def execution_round_id(label: bytes, nonce: bytes) -> bytes:
    """The round id of one execution: the first 16 bytes of SHA-256 over a domain label, the caller's round
    label (16 bytes) and a fresh 16-byte nonce the server draws for this execution. It is what every header,
    signature and key derivation of the round carries, so a message from an earlier execution that reused the
    caller's label (a replayed MaskedInput, say) names another round and is refused. A seeded server source
    draws the same nonce again, which keeps a seeded simulation reproducible bit for bit."""
    if not isinstance(label, bytes) or len(label) != ROUND_ID_LEN:
        raise ProtocolError(f"round label must be {ROUND_ID_LEN} bytes")
    if not isinstance(nonce, bytes) or len(nonce) != ROUND_ID_LEN:
        raise ProtocolError(f"execution nonce must be {ROUND_ID_LEN} bytes")
    return hashlib.sha256(b"secagg-dp/v3/execution-round-id\x00" + label + nonce).digest()[:ROUND_ID_LEN]
