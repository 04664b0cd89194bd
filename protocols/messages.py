"""Wire messages of the secure-aggregation round: frozen dataclasses with explicit byte serialisation.

Every message starts with the 28-byte header of :mod:`protocols.wire` (whose names are re-exported here).
Bodies use big-endian fixed-width fields and explicit counts; :func:`decode` checks every length and
refuses trailing bytes, so malformed input raises :class:`ProtocolError` and nothing else.
Secrets never travel in the clear except Shamir shares in :class:`UnmaskResponse` (as in the paper).
Version 2 added Ed25519 signatures (advertised keys, survivor set) and the consistency round's two kinds; version 3
commits the survivor set as a Merkle sum tree (each proof node of a SurvivorList carries its count).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from protocols import wire
from protocols.graph import roster_graph_seed
from protocols.statements import roster_statement
from protocols.wire import (
    BROADCAST,
    HEADER_LEN,
    KEY_LEN,
    MAGIC,
    MAX_CLIENT_ID,
    ROUND_ID_LEN,
    SECURITY_CODES,
    SERVER,
    SHARE_BYTES,
    SIG_LEN,
    VERSION,
    Header,
    Kind,
    Reader,
    check_bytes,
    check_id,
    check_ids,
    check_shares,
    check_sig_rows,
    pack_boxes,
    pack_ids,
    parse_header,
    peek_kind,
)
from secagg_dp.crypto import merkle
from secagg_dp.crypto.shamir import PIECES_PER_32_BYTES, PRIME
from secagg_dp.errors import ProtocolError

#: Shamir pieces of one 128-bit noise-group seed (two bytes per GF(65537) element).
NOISE_PIECES = PIECES_PER_32_BYTES // 2

_PAIR = struct.Struct(">II")


def _all_bytes(items: tuple[object, ...]) -> bool:
    """Whether every item is a ``bytes`` object (one C-level pass; no generator per box)."""
    return set(map(type, items)) <= {bytes}


# The message classes, plus the wire names callers use through this module (``m.SERVER``, ``m.Kind``, ...).
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
    "NOISE_PIECES",
    "SECURITY_CODES",
    "Kind",
    "peek_kind",
    "RoundOpen",
    "AdvertiseKeys",
    "KeyRoster",
    "RosterEntry",
    "roster_leaves",
    "survivor_chunks",
    "survivor_leaf",
    "HASH_LEN",
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
]


@dataclass(frozen=True)
class RoundOpen(Header):
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
        if not (
            1 <= self.bits <= 62 and 0 <= self.dim < 1 << 32 and 1 <= self.threshold and 0 <= self.neighbours < 1 << 32
        ):
            raise ProtocolError("round parameters out of range")
        if self.security not in SECURITY_CODES.values():
            raise ProtocolError(f"field 'security' must be one of {sorted(SECURITY_CODES.values())}")

    def to_bytes(self) -> bytes:
        return self._head() + struct.pack(
            ">dBIIIB", self.p, self.bits, self.dim, self.threshold, self.neighbours, self.security
        )


@dataclass(frozen=True)
class AdvertiseKeys(Header):
    """Client -> server: check-in with two X25519 public keys (AEAD channel, mask agreement) and the
    sender's Ed25519 signature on them (:func:`protocols.statements.advertise_statement`; zeros in semi-honest mode)."""

    KIND = Kind.ADVERTISE_KEYS
    enc_pk: bytes
    mask_pk: bytes
    signature: bytes = bytes(SIG_LEN)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bytes("enc_pk", self.enc_pk, KEY_LEN)
        check_bytes("mask_pk", self.mask_pk, KEY_LEN)
        check_bytes("signature", self.signature, SIG_LEN)

    def to_bytes(self) -> bytes:
        return self._head() + self.enc_pk + self.mask_pk + self.signature


@dataclass(frozen=True)
class RosterEntry:
    client: int
    enc_pk: bytes
    mask_pk: bytes
    signature: bytes


_ROSTER_DT = np.dtype([("id", ">u4"), ("enc", "u1", (KEY_LEN,)), ("mask", "u1", (KEY_LEN,)), ("sig", "u1", (SIG_LEN,))])
_SLICE_DT = np.dtype([("index", ">u4"), ("entry", _ROSTER_DT)])
HASH_LEN = merkle.HASH_LEN


def hash_list(rows: np.ndarray) -> list[bytes]:
    """The rows of a (m, 32) uint8 array of hashes as m bytes objects (slices of one copy: about 3x faster than
    converting row by row, for the hundreds of proof hashes a client checks per stage)."""
    flat = rows.tobytes()
    return [flat[i : i + HASH_LEN] for i in range(0, len(flat), HASH_LEN)]


def _check_hashes(name: str, a: np.ndarray | None) -> np.ndarray:
    """A read-only (rows, 32) uint8 array (None: no rows)."""
    if a is None:
        a = np.zeros((0, HASH_LEN), dtype=np.uint8)
    if not (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.ndim == 2 and a.shape[1] == HASH_LEN):
        raise ProtocolError(f"field '{name}' must be a (rows, 32) uint8 array")
    a.flags.writeable = False
    return a


def roster_leaves(ids: Sequence[int], enc_pks: np.ndarray, mask_pks: np.ndarray, signatures: np.ndarray) -> list[bytes]:
    """The Merkle leaf hashes of roster entries: SHA-256(0x00 || id || enc_pk || mask_pk || signature)."""
    arr = np.empty(len(ids), dtype=_ROSTER_DT)
    arr["id"] = ids
    arr["enc"] = enc_pks
    arr["mask"] = mask_pks
    arr["sig"] = signatures
    blob, w = arr.tobytes(), _ROSTER_DT.itemsize
    return [merkle.leaf_hash(blob[i * w : (i + 1) * w]) for i in range(len(ids))]


@dataclass(frozen=True)
class KeyRoster(Header):
    """Server -> a client: entries of the committed roster with a proof that they belong to it.

    The roster is the list of the round's admitted check-ins sorted by id, committed by its Merkle root
    ``root`` and its length ``size`` (:func:`protocols.statements.roster_statement`). A message carries the rows
    at leaf ``indices`` (ascending; ``ids`` ascending with them) and the multiproof ``proof`` of those rows
    (:func:`secagg_dp.crypto.merkle.verify_multiproof`). SecAgg+: one message per client with its share
    holders' rows; full graph: one broadcast with every row and an empty proof.

    ``enc_pks`` and ``mask_pks`` are read-only (m, 32) uint8 arrays and ``signatures`` a read-only (m, 64)
    array, row i belonging to ``ids[i]`` at leaf ``indices[i]``.
    """

    KIND = Kind.KEY_ROSTER
    size: int
    root: bytes
    indices: tuple[int, ...]
    ids: tuple[int, ...]
    enc_pks: np.ndarray
    mask_pks: np.ndarray
    signatures: np.ndarray
    proof: np.ndarray = field(default_factory=lambda: np.zeros((0, HASH_LEN), dtype=np.uint8))

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.size, int) and 1 <= self.size <= MAX_CLIENT_ID + 1):
            raise ProtocolError("field 'size' must be a roster length in [1, 2^32 - 2]")
        check_bytes("root", self.root, HASH_LEN)
        check_ids("ids", self.ids)
        if not isinstance(self.indices, tuple) or len(self.indices) != len(self.ids):
            raise ProtocolError("fields 'indices' and 'ids' differ in length")
        idx = np.asarray(self.indices, dtype=np.int64).reshape(-1)
        ids = np.asarray(self.ids, dtype=np.int64).reshape(-1)
        if idx.size and (int(idx[0]) < 0 or int(idx[-1]) >= self.size):
            raise ProtocolError("field 'indices' names a leaf outside the roster")
        if idx.size > 1 and not (bool((idx[1:] > idx[:-1]).all()) and bool((ids[1:] > ids[:-1]).all())):
            raise ProtocolError("fields 'indices' and 'ids' must be sorted, ascending together (a roster by id)")
        for name in ("enc_pks", "mask_pks"):
            a = getattr(self, name)
            if not (isinstance(a, np.ndarray) and a.dtype == np.uint8 and a.shape == (len(self.ids), KEY_LEN)):
                raise ProtocolError(f"field '{name}' must be a (n, 32) uint8 array")
            a.flags.writeable = False
        check_sig_rows("signatures", self.signatures, len(self.ids))
        object.__setattr__(self, "proof", _check_hashes("proof", self.proof))

    def __repr__(self) -> str:
        return f"KeyRoster(round_id={self.round_id.hex()}, size={self.size}, rows={len(self.ids)})"

    @property
    def statement(self) -> bytes:
        """The digest naming this roster (:func:`protocols.statements.roster_statement`)."""
        return roster_statement(self.round_id, self.size, self.root)

    @property
    def graph_seed(self) -> bytes:
        """The SecAgg+ graph seed, derived from the committed roster (:func:`protocols.graph.roster_graph_seed`)."""
        return roster_graph_seed(self.round_id, self.size, self.root)

    def leaf_hashes(self) -> list[bytes]:
        """The Merkle leaf hashes of the rows carried."""
        return roster_leaves(self.ids, self.enc_pks, self.mask_pks, self.signatures)

    def verify(self) -> None:
        """Check that the rows carried sit at ``indices`` of the committed roster; ProtocolError if not."""
        merkle.verify_multiproof(
            self.root,
            self.size,
            dict(zip(self.indices, self.leaf_hashes(), strict=True)),
            hash_list(self.proof),
        )

    def to_bytes(self) -> bytes:
        arr = np.empty(len(self.ids), dtype=_SLICE_DT)
        arr["index"] = self.indices
        arr["entry"]["id"] = self.ids
        arr["entry"]["enc"] = self.enc_pks
        arr["entry"]["mask"] = self.mask_pks
        arr["entry"]["sig"] = self.signatures
        return (
            self._head()
            + self.root
            + struct.pack(">II", self.size, len(self.ids))
            + arr.tobytes()
            + struct.pack(">I", len(self.proof))
            + self.proof.tobytes()
        )

    def entry(self, row: int) -> RosterEntry:
        """The row at position ``row`` of this message (not client id, not leaf index)."""
        return RosterEntry(
            self.ids[row],
            self.enc_pks[row].tobytes(),
            self.mask_pks[row].tobytes(),
            self.signatures[row].tobytes(),
        )


@dataclass(frozen=True)
class ShareKeys(Header):
    """Client -> server: a commitment to b_u and one AEAD box of shares per other share holder."""

    KIND = Kind.SHARE_KEYS
    commitment: bytes
    recipients: tuple[int, ...]
    boxes: tuple[bytes, ...]
    noise_commitment: bytes = b""  # add-then-remove: commitment to the top group's seed (empty without)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bytes("commitment", self.commitment, 32)
        check_ids("recipients", self.recipients)
        if len(self.recipients) != len(self.boxes) or not _all_bytes(self.boxes):
            raise ProtocolError("recipients and boxes differ in length")
        if self.noise_commitment:
            check_bytes("noise_commitment", self.noise_commitment, 32)

    def to_bytes(self) -> bytes:
        return self._head() + self.commitment + pack_boxes(self.recipients, self.boxes) + self.noise_commitment


@dataclass(frozen=True)
class ShareBundle(Header):
    """Server -> one client: the boxes addressed to it, with their senders."""

    KIND = Kind.SHARE_BUNDLE
    senders: tuple[int, ...]
    boxes: tuple[bytes, ...]

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ids("senders", self.senders)
        if len(self.senders) != len(self.boxes) or not _all_bytes(self.boxes):
            raise ProtocolError("senders and boxes differ in length")

    def to_bytes(self) -> bytes:
        return self._head() + pack_boxes(self.senders, self.boxes)


@dataclass(frozen=True)
class MaskedInput(Header):
    """Client -> server: y_u, d residues of ``bits`` bits, bit-packed on the wire (:func:`protocols.wire.pack_residues`:
    ceil(d bits / 8) bytes after a 5-byte (bits, d) field; shown in repr only by length)."""

    KIND = Kind.MASKED_INPUT
    bits: int
    y: np.ndarray

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.y, np.ndarray) and self.y.dtype == np.uint64 and self.y.ndim == 1):
            raise ProtocolError("field 'y' must be a 1-D uint64 array")
        if not 1 <= self.bits <= 62:
            raise ProtocolError("field 'bits' out of range")
        if self.y.size >= 1 << 32:
            raise ProtocolError("field 'y' is too long")
        if self.y.size and int(self.y.max()) >> self.bits:
            raise ProtocolError("masked input holds a value outside Z_q")

    def __repr__(self) -> str:
        return f"MaskedInput(sender={self.sender}, bits={self.bits}, dim={self.y.size})"

    def to_bytes(self) -> bytes:
        return self._head() + struct.pack(">BI", self.bits, self.y.size) + wire.pack_residues(self.y, self.bits)

    @staticmethod
    def encode_packed(round_id: bytes, sender: int, recipient: int, bits: int, dim: int, packed: bytes) -> bytes:
        """The wire bytes of ``MaskedInput(round_id, sender, recipient, bits, y).to_bytes()`` from ``y`` already
        packed (``packed = pack_residues(y, bits)``, e.g. block by block): no unpacked copy of y is made."""
        Header(round_id, sender, recipient)  # checks the header fields
        if not (1 <= bits <= 62 and 0 <= dim < 1 << 32):
            raise ProtocolError("field 'bits' or the dimension out of range")
        wire.check_packed(packed, dim, bits)
        head = struct.pack(">2sBB16sII", MAGIC, VERSION, int(Kind.MASKED_INPUT), round_id, sender, recipient)
        return head + struct.pack(">BI", bits, dim) + packed


_PROOF_DT = np.dtype([("count", ">u4"), ("hash", "u1", (HASH_LEN,))])


def survivor_leaf(chunk: np.ndarray | bytes) -> tuple[int, bytes]:
    """The sum-tree leaf of one 32-byte chunk of the survivor bitmap: (popcount, SHA-256(0x10 || popcount ||
    chunk)) (:func:`secagg_dp.crypto.merkle.sum_leaf_hash`)."""
    raw = bytes(chunk.tobytes() if isinstance(chunk, np.ndarray) else chunk)
    count = int.from_bytes(raw, "big").bit_count()
    return count, merkle.sum_leaf_hash(count, raw)


def survivor_chunks(bits: np.ndarray) -> np.ndarray:
    """The survivor bitmap (one bool per ring position) as (ceil(n / 256), 32) uint8 Merkle leaves, position p
    at bit 7 - p % 8 of byte p // 8 (zero padding after position n - 1)."""
    n = bits.size
    packed = np.packbits(np.asarray(bits, dtype=bool))
    out = np.zeros(-(-n // 256) * 32, dtype=np.uint8)
    out[: packed.size] = packed
    return out.reshape(-1, 32)


@dataclass(frozen=True)
class SurvivorList(Header):
    """Server -> each client of U3 (active mode): a commitment to the survivor set U3, for the client to sign,
    and the part of it the client needs.

    U3 is committed as a bitmap over the ring positions of the roster (:func:`survivor_chunks`), 256
    positions per leaf of a Merkle sum tree (:class:`~secagg_dp.crypto.merkle.MerkleSumTree`; leaf
    (popcount, :func:`survivor_leaf`)), so every node carries the number of survivors under it: ``root`` is
    the root's hash and ``count`` = |U3| its count. The message carries the leaves ``chunk_indices``
    (ascending) with their multiproof, the sibling hashes ``proof`` and their counts ``proof_counts``:
    SecAgg+, the leaves covering the recipient's two-hop positions (:func:`protocols.graph.two_hop_positions`);
    full graph, every leaf (empty proof). The client recomputes the root's count from them (each sibling's
    count at most the positions under it) and refuses a ``count`` that differs. ``near_ids`` (SecAgg+) are the
    ids at those two-hop positions, ascending (their leaf indices ascend with them); the client checks them
    against its neighbours' own statements before it relies on them.

    Wire layout after the header: root (32), count (4), chunk indices (count 4 + 4 each), the chunks (32
    each), proof length p (4), p x (sibling count (4), sibling hash (32)), near ids (count 4 + 4 each).
    """

    KIND = Kind.SURVIVOR_LIST
    count: int
    root: bytes
    chunk_indices: tuple[int, ...]
    chunks: np.ndarray
    proof: np.ndarray = field(default_factory=lambda: np.zeros((0, HASH_LEN), dtype=np.uint8))
    near_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    proof_counts: tuple[int, ...] = ()  # the count of each sibling in ``proof`` (Merkle sum tree)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (isinstance(self.count, int) and 0 <= self.count <= MAX_CLIENT_ID + 1):
            raise ProtocolError("field 'count' out of range")
        check_bytes("root", self.root, HASH_LEN)
        check_ids("chunk_indices", self.chunk_indices)
        idx = self.chunk_indices
        if any(b <= a for a, b in zip(idx, idx[1:], strict=False)):
            raise ProtocolError("field 'chunk_indices' must be ascending")
        chunks = _check_hashes("chunks", self.chunks)
        if chunks.shape[0] != len(idx):
            raise ProtocolError("fields 'chunk_indices' and 'chunks' differ in length")
        object.__setattr__(self, "proof", _check_hashes("proof", self.proof))
        pc = self.proof_counts
        if not isinstance(pc, tuple) or len(pc) != self.proof.shape[0]:
            raise ProtocolError("fields 'proof' and 'proof_counts' differ in length")
        if any(isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_CLIENT_ID + 1 for c in pc):
            raise ProtocolError("field 'proof_counts' must hold counts in [0, 2^32 - 2]")
        arr = self.near_ids
        if arr is None:
            arr = np.zeros(0, dtype=np.int64)
        if isinstance(arr, (tuple, list)):
            arr = np.asarray(arr) if len(arr) else np.zeros(0, dtype=np.int64)
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise ProtocolError("field 'near_ids' must be a 1-D sequence of client ids")
        if arr.dtype != np.int64 or arr.flags.writeable:
            arr = arr.astype(np.int64)
        if arr.size and (int(arr[0]) < 0 or int(arr[-1]) > MAX_CLIENT_ID or not bool((arr[1:] > arr[:-1]).all())):
            raise ProtocolError("field 'near_ids' must hold valid client ids, ascending")
        arr.flags.writeable = False
        object.__setattr__(self, "near_ids", arr)

    def __repr__(self) -> str:
        return f"SurvivorList(sender={self.sender}, recipient={self.recipient}, count={self.count})"

    def proof_nodes(self) -> list[tuple[int, bytes]]:
        """The multiproof as (count, hash) pairs (:func:`secagg_dp.crypto.merkle.verify_sum_multiproof`)."""
        return list(zip(self.proof_counts, hash_list(self.proof), strict=True))

    def _proof_rows(self) -> bytes:
        rows = np.empty(len(self.proof_counts), dtype=_PROOF_DT)
        rows["count"] = self.proof_counts
        rows["hash"] = self.proof
        return rows.tobytes()

    def to_bytes(self) -> bytes:
        return (
            self._head()
            + self.root
            + struct.pack(">I", self.count)
            + pack_ids(self.chunk_indices)
            + self.chunks.tobytes()
            + struct.pack(">I", len(self.proof))
            + self._proof_rows()
            + struct.pack(">I", self.near_ids.size)
            + self.near_ids.astype(">u4").tobytes()
        )


@dataclass(frozen=True)
class SurvivorSignature(Header):
    """Client -> server (active mode): its signature on the survivor set it was sent, over
    :func:`protocols.statements.consistency_statement` (round, roster statement, survivor root, count)."""

    KIND = Kind.SURVIVOR_SIGNATURE
    signature: bytes

    def __post_init__(self) -> None:
        super().__post_init__()
        check_bytes("signature", self.signature, SIG_LEN)

    def to_bytes(self) -> bytes:
        return self._head() + self.signature


@dataclass(frozen=True)
class UnmaskRequest(Header):
    """Server -> one survivor: who sent a masked input (survivors) and who dropped after sharing keys; in
    active mode also the survivor-set signatures the client needs (``signers[i]`` made ``signatures[i]``)."""

    KIND = Kind.UNMASK_REQUEST
    survivors: tuple[int, ...]
    dropped: tuple[int, ...]
    signers: tuple[int, ...] = ()
    signatures: np.ndarray = field(default_factory=lambda: np.zeros((0, SIG_LEN), dtype=np.uint8))
    noise_group: int = 0  # add-then-remove: remove groups noise_group..G of every survivor (0: none)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ids("survivors", self.survivors)
        check_ids("dropped", self.dropped)
        check_ids("signers", self.signers)
        check_sig_rows("signatures", self.signatures, len(self.signers))
        check_id("noise_group", self.noise_group)

    def __repr__(self) -> str:
        return (
            f"UnmaskRequest(sender={self.sender}, recipient={self.recipient}, survivors={len(self.survivors)}, "
            f"dropped={len(self.dropped)}, signers={len(self.signers)})"
        )

    def to_bytes(self) -> bytes:
        return (
            self._head()
            + pack_ids(self.survivors)
            + pack_ids(self.dropped)
            + pack_ids(self.signers)
            + self.signatures.tobytes()
            + (struct.pack(">I", self.noise_group) if self.noise_group else b"")
        )


def _no_shares() -> np.ndarray:
    return np.zeros((0, PIECES_PER_32_BYTES), dtype=np.uint32)


@dataclass(frozen=True)
class UnmaskResponse(Header):
    """Survivor -> server: b-shares of survivors, key-shares of dropped clients, and owners whose box failed."""

    KIND = Kind.UNMASK_RESPONSE
    self_owners: tuple[int, ...]
    self_shares: np.ndarray = field(default_factory=lambda: _no_shares())  # (len(self_owners), 16) uint32
    key_owners: tuple[int, ...] = ()
    key_shares: np.ndarray = field(default_factory=lambda: _no_shares())
    failed: tuple[int, ...] = ()
    noise_owners: tuple[int, ...] = ()  # add-then-remove: survivors whose requested group seed is shared
    noise_shares: np.ndarray = field(default_factory=lambda: np.zeros((0, NOISE_PIECES), dtype=np.uint32))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_ids("self_owners", self.self_owners)
        check_ids("key_owners", self.key_owners)
        check_ids("failed", self.failed)
        check_ids("noise_owners", self.noise_owners)
        check_shares("self_shares", self.self_shares, len(self.self_owners))
        check_shares("key_shares", self.key_shares, len(self.key_owners))
        a = self.noise_shares
        if not (
            isinstance(a, np.ndarray)
            and a.dtype == np.uint32
            and a.shape == (len(self.noise_owners), NOISE_PIECES)
            and (a.size == 0 or int(a.max()) < PRIME)
        ):
            raise ProtocolError(f"field 'noise_shares' must be ({len(self.noise_owners)}, {NOISE_PIECES}) GF(p) uint32")
        if set(self.self_owners) & set(self.key_owners):
            raise ProtocolError("a response may not carry both shares for one client")
        if not set(self.noise_owners) <= set(self.self_owners):
            raise ProtocolError("noise-seed shares are only for clients whose self-mask share is revealed")

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
            + (block(self.noise_owners, self.noise_shares) if self.noise_owners else b"")
        )


@dataclass(frozen=True)
class SharePlaintext:
    """Inside an AEAD box from ``owner`` to ``holder``: its shares of sk_u (mask key) and of b_u, and the
    digest of the owner's share holders (:func:`protocols.statements.holders_statement`; zeros on the full graph)."""

    owner: int
    holder: int
    key_share: np.ndarray
    self_share: np.ndarray
    holders_digest: bytes = bytes(32)
    LEN: ClassVar[int] = 8 + 2 * SHARE_BYTES + 32

    def __post_init__(self) -> None:
        check_id("owner", self.owner)
        check_id("holder", self.holder)
        for name in ("key_share", "self_share"):
            a = getattr(self, name)
            if not (
                type(a) is np.ndarray
                and a.dtype == np.uint32
                and a.shape == (PIECES_PER_32_BYTES,)
                and int(a.max()) < PRIME
            ):
                raise ProtocolError(f"field '{name}' must be {PIECES_PER_32_BYTES} uint32 elements of GF(p)")
        check_bytes("holders_digest", self.holders_digest, 32)

    def __repr__(self) -> str:
        return f"SharePlaintext(owner={self.owner}, holder={self.holder}, shares=<hidden>)"

    def to_bytes(self) -> bytes:
        return (
            struct.pack(">II", self.owner, self.holder)
            + self.key_share.astype(">u4").tobytes()
            + self.self_share.astype(">u4").tobytes()
            + self.holders_digest
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> SharePlaintext:
        if len(data) != cls.LEN:
            raise ProtocolError("share plaintext has the wrong length")
        owner, holder = struct.unpack_from(">II", data)
        arr = np.frombuffer(data[:-32], dtype=">u4", offset=8).astype(np.uint32)
        return cls(owner, holder, arr[:PIECES_PER_32_BYTES].copy(), arr[PIECES_PER_32_BYTES:].copy(), data[-32:])

    @classmethod
    def pack_rows(
        cls, owner: int, holders: Sequence[int], shares: np.ndarray, holders_digest: bytes = bytes(32)
    ) -> list[bytes]:
        """``SharePlaintext(owner, holders[i], *shares[i] split in halves).to_bytes()`` for every row i,
        checked and converted once for the whole (len(holders), 32) share matrix."""
        check_id("owner", owner)
        check_ids("holders", tuple(holders))
        rows = np.asarray(shares)
        if (
            rows.dtype != np.uint32
            or rows.shape != (len(holders), 2 * PIECES_PER_32_BYTES)
            or (rows.size and int(rows.max()) >= PRIME)
        ):
            raise ProtocolError(
                f"field 'shares' must be ({len(holders)}, {2 * PIECES_PER_32_BYTES}) uint32 elements of GF(p)"
            )
        body = rows.astype(">u4").tobytes()
        w = 4 * rows.shape[1]
        check_bytes("holders_digest", holders_digest, 32)
        return [_PAIR.pack(owner, v) + body[i * w : (i + 1) * w] + holders_digest for i, v in enumerate(holders)]

    @classmethod
    def unpack_rows(
        cls, plaintexts: Sequence[bytes], owners: Sequence[int], holder: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Parse plaintexts that should come from ``owners[i]`` to ``holder``, checked in one pass: returns
        (ok, shares) where ``ok[i]`` says plaintext i is well formed (length, GF(p) elements) and names
        exactly (owners[i], holder), and ``shares[i]`` is its 32 elements (key share, then self share)."""
        m_ = len(plaintexts)
        ok = np.fromiter((len(p) == cls.LEN for p in plaintexts), dtype=bool, count=m_)
        blob = b"".join(
            p[:-32] if good else bytes(cls.LEN - 32) for p, good in zip(plaintexts, ok.tolist(), strict=True)
        )
        arr = np.frombuffer(blob, dtype=">u4").reshape(m_, 2 + 2 * PIECES_PER_32_BYTES).astype(np.int64)
        ok &= arr[:, 0] == np.asarray(owners, dtype=np.int64).reshape(-1)
        ok &= arr[:, 1] == holder
        ok &= (arr[:, 2:] < PRIME).all(axis=1)
        return ok, arr[:, 2:].astype(np.uint32)


Message = (
    RoundOpen
    | AdvertiseKeys
    | KeyRoster
    | ShareKeys
    | ShareBundle
    | MaskedInput
    | SurvivorList
    | SurvivorSignature
    | UnmaskRequest
    | UnmaskResponse
)


def decode(data: bytes) -> Message:
    """Parse one serialised message; any malformation raises ProtocolError."""
    data = bytes(data)
    kind, rid, sender, recipient = parse_header(data)
    if kind is Kind.KEY_ROSTER:
        return _decode_roster(data)
    r = Reader(data, HEADER_LEN)
    h = (rid, sender, recipient)
    if kind is Kind.ROUND_OPEN:
        p, bits, dim, t, k, sec = struct.unpack(">dBIIIB", r.take(22))
        msg: Message = RoundOpen(*h, p, bits, dim, t, k, sec)
    elif kind is Kind.ADVERTISE_KEYS:
        msg = AdvertiseKeys(*h, r.take(KEY_LEN), r.take(KEY_LEN), r.take(SIG_LEN))
    elif kind is Kind.SHARE_KEYS:
        com = r.take(32)
        recipients, boxes = r.boxes()
        msg = ShareKeys(*h, com, recipients, boxes, r.take(32) if r.pos < len(data) else b"")
    elif kind is Kind.SHARE_BUNDLE:
        msg = ShareBundle(*h, *r.boxes())
    elif kind is Kind.MASKED_INPUT:
        bits = r.take(1)[0]
        n = r.u32()
        if not 1 <= bits <= 62:
            raise ProtocolError("field 'bits' out of range")
        body = r.take(wire.packed_len(n, bits))
        wire.check_packed(body, n, bits)
        msg = MaskedInput(*h, bits, wire.unpack_residues(body, n, bits))
    elif kind is Kind.SURVIVOR_LIST:
        root, count = r.take(HASH_LEN), r.u32()
        cidx = r.ids()
        chunks = np.frombuffer(r.take(len(cidx) * HASH_LEN), dtype=np.uint8).reshape(-1, HASH_LEN).copy()
        p = r.u32()
        rows = np.frombuffer(r.take(p * _PROOF_DT.itemsize), dtype=_PROOF_DT)
        proof = np.array(rows["hash"], dtype=np.uint8).reshape(p, HASH_LEN)
        msg = SurvivorList(*h, count, root, cidx, chunks, proof, r.id_array(), tuple(rows["count"].tolist()))
    elif kind is Kind.SURVIVOR_SIGNATURE:
        msg = SurvivorSignature(*h, r.take(SIG_LEN))
    elif kind is Kind.UNMASK_REQUEST:
        alive, gone, signers = r.ids(), r.ids(), r.ids()
        sigs = r.sigs(len(signers))
        group = 0
        if r.pos < len(data):
            group = r.u32()
            if group == 0:
                raise ProtocolError("noise group 0 is encoded by its absence")
        msg = UnmaskRequest(*h, alive, gone, signers, sigs, group)
    else:
        so = r.ids()
        ss = r.shares(len(so))
        ko = r.ids()
        ks = r.shares(len(ko))
        failed = r.ids()
        no: tuple[int, ...] = ()
        ns = np.zeros((0, NOISE_PIECES), dtype=np.uint32)
        if r.pos < len(data):
            no = r.ids()
            if not no:
                raise ProtocolError("empty noise-share block")
            raw = r.take(len(no) * 4 * NOISE_PIECES)
            ns = np.frombuffer(raw, dtype=">u4").astype(np.uint32).reshape(len(no), NOISE_PIECES)
        msg = UnmaskResponse(*h, so, ss, ko, ks, failed, no, ns)
    r.done()
    return msg


@functools.lru_cache(maxsize=2)
def _decode_roster(data: bytes) -> KeyRoster:
    """Parse a KeyRoster. A full-graph roster is a broadcast, so every client is handed the same bytes;
    parsing is a pure function of them and the result is immutable (frozen, read-only arrays), so the last
    rosters parsed are shared. Where one process plays all n clients (the simulation) this keeps one O(n)
    roster instead of n copies; a malformed roster raises every time (exceptions are not cached)."""
    _, rid, sender, recipient = parse_header(data)
    r = Reader(data, HEADER_LEN)
    root = r.take(HASH_LEN)
    size, rows = struct.unpack(">II", r.take(8))
    arr = np.frombuffer(r.take(rows * _SLICE_DT.itemsize), dtype=_SLICE_DT)
    p = r.u32()
    proof = np.frombuffer(r.take(p * HASH_LEN), dtype=np.uint8).reshape(p, HASH_LEN).copy()
    r.done()
    entry = arr["entry"]
    return KeyRoster(
        rid,
        sender,
        recipient,
        size,
        root,
        tuple(arr["index"].tolist()),
        tuple(entry["id"].tolist()),
        np.array(entry["enc"]),
        np.array(entry["mask"]),
        np.array(entry["sig"]),
        proof,
    )
