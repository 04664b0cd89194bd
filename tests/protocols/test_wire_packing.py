"""Bit-packed residues on the wire (protocols.wire): checked against an independent Python-int packer, and
strict parsing of MaskedInput (exact length, zero padding bits)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols import messages as m
from protocols import wire
from secagg_dp.crypto import masking
from secagg_dp.errors import ProtocolError

RID = b"\x07" * 16


def reference_pack(values: list[int], bits: int) -> bytes:
    """Independent packer for the integer sum_i x_i 2^(i bits) as ceil(d bits / 8) little-endian bytes: the
    bit string, least significant bit first, cut into bytes of 8 bits (each read back most significant first)."""
    stream = "".join(format(x, f"0{bits}b")[::-1] for x in values)
    stream += "0" * (-len(stream) % 8)
    return bytes(int(stream[i : i + 8][::-1], 2) for i in range(0, len(stream), 8))


@pytest.mark.parametrize("bits", [1, 2, 7, 8, 13, 20, 31, 32, 33, 47, 61, 62])
@pytest.mark.parametrize("d", [0, 1, 5, 63, 64, 65, 127, 999, 1001])
def test_pack_matches_python_int_packer(bits, d):
    rng = np.random.default_rng(1000 * bits + d)
    v = rng.integers(0, 1 << bits, size=d, dtype=np.uint64)
    if d:
        v[0] = v[-1] = (1 << bits) - 1  # all-ones residues at both ends reach the padding boundary
    packed = wire.pack_residues(v, bits)
    assert packed == reference_pack(v.tolist(), bits)
    assert len(packed) == -(-d * bits // 8)
    back = wire.unpack_residues(packed, d, bits)
    assert back.dtype == np.uint64 and back.tolist() == v.tolist()


@pytest.mark.parametrize("bits", [1, 7, 20, 32, 33, 62])
def test_blocks_and_ranges_match_the_reference(bits):
    """Vectors longer than one block, and sub-ranges starting at multiples of 64, odd d."""
    d = 2 * wire.PACK_BLOCK + 77
    rng = np.random.default_rng(bits)
    v = rng.integers(0, 1 << bits, size=d, dtype=np.uint64)
    packed = wire.pack_residues(v, bits)
    assert packed == reference_pack(v.tolist(), bits)
    for lo, hi in [(0, d), (64, 64), (wire.PACK_BLOCK - 64, wire.PACK_BLOCK + 3), (2 * wire.PACK_BLOCK, d)]:
        assert wire.unpack_residues(packed, d, bits, start=lo, stop=hi).tolist() == v[lo:hi].tolist()


def test_pack_refuses_values_outside_zq():
    with pytest.raises(ProtocolError, match="outside"):
        wire.pack_residues(np.array([1 << 20], dtype=np.uint64), 20)


@pytest.mark.parametrize("bits, d", [(20, 1001), (7, 3), (1, 9), (62, 5)])
def test_masked_input_round_trip_and_size(bits, d):
    y = np.random.default_rng(d).integers(0, 1 << bits, size=d, dtype=np.uint64)
    data = m.MaskedInput(RID, 3, m.SERVER, bits, y).to_bytes()
    assert len(data) == m.HEADER_LEN + 5 + -(-d * bits // 8)
    assert data[m.HEADER_LEN + 5 :] == reference_pack(y.tolist(), bits)
    back = m.decode(data)
    assert isinstance(back, m.MaskedInput) and back.bits == bits and back.y.tolist() == y.tolist()
    assert m.MaskedInput.encode_packed(RID, 3, m.SERVER, bits, d, wire.pack_residues(y, bits)) == data


@pytest.mark.parametrize("bits, d", [(20, 1001), (7, 3), (1, 9), (62, 5)])
def test_masked_input_strict_parsing(bits, d):
    data = m.MaskedInput(RID, 3, m.SERVER, bits, np.zeros(d, dtype=np.uint64)).to_bytes()
    with pytest.raises(ProtocolError, match="truncated"):
        m.decode(data[:-1])
    with pytest.raises(ProtocolError, match="trailing"):
        m.decode(data + b"\0")
    pad = (d * bits) % 8
    assert pad, "every case here leaves padding bits in the last byte"
    with pytest.raises(ProtocolError, match="padding"):
        m.decode(data[:-1] + bytes([data[-1] | 1 << pad]))
    with pytest.raises(ProtocolError, match="padding"):
        m.MaskedInput.encode_packed(RID, 3, m.SERVER, bits, d, data[m.HEADER_LEN + 5 : -1] + b"\x80")
    with pytest.raises(ProtocolError):  # a bit width outside [1, 62]
        m.decode(data[: m.HEADER_LEN] + bytes([63]) + data[m.HEADER_LEN + 1 :])


def test_upload_is_raw_plus_a_constant():
    """d = 10^5 at 20 bits: the MaskedInput is the raw vector (d bits / 8 bytes) plus header and (bits, d)."""
    d, bits = 10**5, 20
    data = m.MaskedInput(RID, 3, m.SERVER, bits, np.zeros(d, dtype=np.uint64)).to_bytes()
    assert len(data) == d * bits // 8 + m.HEADER_LEN + 5


@pytest.mark.parametrize("bits", [20, 33])
def test_blockwise_masking_equals_mask_input(bits):
    d = wire.PACK_BLOCK + 100
    rng = np.random.default_rng(bits)
    x = rng.integers(0, 1 << bits, size=d, dtype=np.uint64)
    pairwise = [(bytes([i]) * 32, 1 if i % 2 else -1) for i in range(1, 6)]
    whole = masking.mask_input(x, bits=bits, self_seed=b"\x01" * 32, pairwise=pairwise)
    blocks = [x[:64], x[64 : wire.PACK_BLOCK], x[wire.PACK_BLOCK :]]
    parts = list(masking.mask_input_blocks(blocks, bits=bits, self_seed=b"\x01" * 32, pairwise=pairwise))
    assert np.concatenate(parts).tolist() == whole.tolist()


@settings(max_examples=30, deadline=None)
@given(rows=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
def test_hash_list_is_the_rows_as_bytes(rows, seed):
    a = np.random.default_rng(seed).integers(0, 256, (rows, 32), dtype=np.uint8)
    assert m.hash_list(a) == [bytes(a[i]) for i in range(rows)]


def test_survivor_list_layout_carries_each_siblings_count():
    # Layout written out with struct: root, count, chunk ids, chunks, proof length, (count, hash) per sibling,
    # near ids (docs: SurvivorList); the counts are part of the sum-tree multiproof.
    import struct

    chunks = np.arange(64, dtype=np.uint8).reshape(2, 32)
    proof = np.full((2, 32), 7, dtype=np.uint8)
    msg = m.SurvivorList(RID, m.SERVER, 3, 300, b"r" * 32, (0, 2), chunks, proof, (1, 3), (256, 12))
    body = (
        b"r" * 32
        + struct.pack(">I", 300)
        + struct.pack(">III", 2, 0, 2)
        + chunks.tobytes()
        + struct.pack(">I", 2)
        + struct.pack(">I", 256)
        + bytes([7] * 32)
        + struct.pack(">I", 12)
        + bytes([7] * 32)
        + struct.pack(">III", 2, 1, 3)
    )
    assert msg.to_bytes()[m.HEADER_LEN :] == body
    back = m.decode(msg.to_bytes())
    assert back.proof_counts == (256, 12) and back.proof_nodes() == [(256, bytes([7] * 32)), (12, bytes([7] * 32))]
    with pytest.raises(ProtocolError, match="proof_counts"):
        m.SurvivorList(RID, m.SERVER, 3, 300, b"r" * 32, (0, 2), chunks, proof, (1, 3), (256,))
    with pytest.raises(ProtocolError, match="proof_counts"):
        m.SurvivorList(RID, m.SERVER, 3, 300, b"r" * 32, (0, 2), chunks, proof, (1, 3), (256, -1))
    # a leaf is (popcount, H(0x10 || popcount || chunk)): 32 bytes with 3 bits set
    raw = bytes([0b1010_0000] + [0] * 30 + [1])
    assert m.survivor_leaf(raw) == (3, hashlib.sha256(b"\x10" + struct.pack(">I", 3) + raw).digest())
