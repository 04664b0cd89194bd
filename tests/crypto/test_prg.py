"""PRG: known-answer keystream, exact mapping to Z_q, every residue reached, chi-square uniformity."""

import json
import pathlib

import numpy as np
import pytest
from scipy import stats

from secagg_dp.crypto import prg
from secagg_dp.crypto.randomness import SeededRandom, uniform_below
from secagg_dp.errors import ParameterError

VECTORS = json.loads((pathlib.Path(__file__).parent / "vectors" / "aes256ctr_keystream.json").read_text())["vectors"]
ALPHA = 1e-6  # false-failure rate of every chi-square test below


@pytest.mark.parametrize("vec", VECTORS)
def test_keystream_matches_openssl(vec):
    # Vectors produced by the OpenSSL CLI (see the JSON's "origin").
    assert prg.keystream(bytes.fromhex(vec["key"]), 64).hex() == vec["keystream"]


@pytest.mark.parametrize("bits", [1, 8, 31, 32, 33, 62])
def test_expand_mask_is_low_bits_of_keystream_words(bits):
    vec = VECTORS[1]
    key, ks = bytes.fromhex(vec["key"]), bytes.fromhex(vec["keystream"])
    width = 4 if bits <= 32 else 8
    words = [int.from_bytes(ks[i : i + width], "little") for i in range(0, 64, width)]
    expected = [w % (1 << bits) for w in words]  # Python-int oracle
    assert prg.expand_mask(key, len(words), bits).tolist() == expected


def test_seed_must_be_full_32_bytes():
    with pytest.raises(ParameterError):
        prg.expand_mask(b"\x00" * 31, 4, 8)
    with pytest.raises(TypeError):
        prg.expand_mask("x" * 32, 4, 8)


@pytest.mark.parametrize("bits", [8, 32, 62])
def test_accumulate_equals_modular_sum_of_masks(bits):
    seeds = [bytes([i]) * 32 for i in range(1, 5)]
    n = 100_003  # spans several chunks with a ragged tail
    acc = np.zeros(n, dtype=prg.word_dtype(bits))
    for s in seeds[:3]:
        prg.accumulate_mask(acc, s, bits)
    prg.accumulate_mask(acc, seeds[3], bits, sign=-1)
    got = acc.astype(np.uint64) & np.uint64((1 << bits) - 1)
    idx = np.array([0, 1, 32767, 32768, 65536, n - 1])
    masks = [prg.expand_mask(s, n, bits)[idx] for s in seeds]
    q = 1 << bits
    expected = [
        (int(masks[0][i]) + int(masks[1][i]) + int(masks[2][i]) - int(masks[3][i])) % q for i in range(idx.size)
    ]
    assert got[idx].tolist() == expected


def test_every_residue_occurs_including_q_minus_1():
    # The bug we guard against: a mask drawn with randint(0, q - 1) never yields q - 1.
    for bits in (1, 4, 8):
        m = prg.expand_mask(b"\x07" * 32, 64 << bits, bits)
        assert np.unique(m).size == 1 << bits and int(m.max()) == (1 << bits) - 1
    for q in (3, 251, 255, 257):
        m = prg.uniform_mod(b"\x09" * 32, 64 * q, q)
        assert np.unique(m).size == q and int(m.max()) == q - 1 and int(m.min()) == 0


def _chi2_uniform(samples: np.ndarray, q: int) -> tuple[float, float]:
    counts = np.bincount(samples.astype(np.int64), minlength=q)
    expected = samples.size / q
    stat = float(((counts - expected) ** 2 / expected).sum())
    return stat, float(stats.chi2.isf(ALPHA, q - 1))  # critical value at alpha = 1e-6


@pytest.mark.parametrize("bits", [4, 8])
def test_expand_mask_chi_square_uniform(bits):
    q = 1 << bits
    stat, crit = _chi2_uniform(prg.expand_mask(b"\x11" * 32, 500 * q, bits), q)
    assert stat < crit


@pytest.mark.parametrize("q", [3, 100, 251])
def test_rejection_sampling_chi_square_uniform(q):
    stat, crit = _chi2_uniform(prg.uniform_mod(b"\x13" * 32, 500 * q, q), q)
    assert stat < crit
    src = SeededRandom(b"\x17" * 32)
    stat, crit = _chi2_uniform(uniform_below(src, 500 * q, q), q)
    assert stat < crit


def test_uniform_mod_rejects_bad_modulus():
    with pytest.raises(ParameterError):
        prg.uniform_mod(b"\x00" * 32, 3, 1)
