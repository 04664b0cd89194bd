"""Masking recipe: masks cancel exactly; the server's view of one masked input is uniform and input-free."""

import numpy as np
import pytest
from scipy import stats

from secagg_dp.crypto import keys, masking
from secagg_dp.crypto.prg import expand_mask
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import ParameterError

RID = b"\x01" * 16
ALPHA = 1e-6  # false-failure rate of each chi-square test


def test_pairwise_seed_symmetric_and_distinct_from_channel_key():
    a, b = keys.generate_keypair(), keys.generate_keypair()
    s_ab = masking.pairwise_seed(a, b.public, round_id=RID, own_id=3, peer_id=8)
    s_ba = masking.pairwise_seed(b, a.public, round_id=RID, own_id=8, peer_id=3)
    assert s_ab == s_ba
    assert s_ab != masking.channel_key(a, b.public, round_id=RID, own_id=3, peer_id=8)
    assert s_ab != masking.pairwise_seed(a, b.public, round_id=b"\x02" * 16, own_id=3, peer_id=8)


@pytest.mark.parametrize("bits", [8, 32, 40, 62])
def test_two_clients_masks_cancel_exactly(bits):
    rng = np.random.default_rng(5)
    q = 1 << bits
    xu = rng.integers(0, q, size=1000, dtype=np.uint64)
    xv = rng.integers(0, q, size=1000, dtype=np.uint64)
    a, b = keys.generate_keypair(), keys.generate_keypair()
    s = masking.pairwise_seed(a, b.public, round_id=RID, own_id=1, peer_id=2)
    bu, bv = b"\x0a" * 32, b"\x0b" * 32
    yu = masking.mask_input(xu, bits=bits, self_seed=bu, pairwise=[(s, masking.mask_sign(1, 2))])
    yv = masking.mask_input(xv, bits=bits, self_seed=bv, pairwise=[(s, masking.mask_sign(2, 1))])
    mu, mv = expand_mask(bu, 1000, bits), expand_mask(bv, 1000, bits)
    got = [(int(yu[i]) + int(yv[i]) - int(mu[i]) - int(mv[i])) % q for i in range(1000)]  # Python-int oracle
    assert got == [(int(xu[i]) + int(xv[i])) % q for i in range(1000)]


def test_self_mask_commitment_binds_round_owner_and_seed():
    c = masking.self_mask_commitment(b"\x01" * 32, round_id=RID, owner=4)
    assert c != masking.self_mask_commitment(b"\x02" * 32, round_id=RID, owner=4)
    assert c != masking.self_mask_commitment(b"\x01" * 32, round_id=RID, owner=5)
    assert c != masking.self_mask_commitment(b"\x01" * 32, round_id=b"\x02" * 16, owner=4)


@pytest.mark.slow
def test_masked_input_uniform_over_all_residues_and_independent_of_input():
    """Server's view of one client's y_u (first coordinate) over fresh b_u and pairwise keys, for two very
    different inputs: each histogram passes a chi-square uniformity test at alpha = 1e-6 (critical value
    chi2.isf(1e-6, q - 1)), and a chi-square homogeneity test of the two histograms at alpha = 1e-6."""
    bits, q, n = 6, 64, 64 * 300
    src = SeededRandom(b"\x21" * 32)
    hists = []
    for x0 in (0, q - 1):
        x = np.full(3, x0, dtype=np.uint64)
        ys = np.empty(n, dtype=np.int64)
        for i in range(n):
            b_u = src.bytes(32)
            pair = (src.bytes(32), 1)  # a neighbour's seed, as HKDF would give
            ys[i] = int(masking.mask_input(x, bits=bits, self_seed=b_u, pairwise=[pair])[0])
        counts = np.bincount(ys, minlength=q)
        assert counts.min() > 0  # every residue including q - 1 occurs
        stat = ((counts - n / q) ** 2 / (n / q)).sum()
        assert stat < stats.chi2.isf(ALPHA, q - 1)
        hists.append(counts)
    _, pval, _, _ = stats.chi2_contingency(np.array(hists))
    assert pval > ALPHA


def test_neighbour_secrets_are_the_channel_keys_and_pairwise_seeds():
    src = SeededRandom(b"\x05" * 32)
    enc, mask = keys.generate_keypair(source=src), keys.generate_keypair(source=src)
    rid = bytes(range(16))
    peers = [(v, keys.generate_keypair(source=src), keys.generate_keypair(source=src)) for v in (3, 9, 2**32 - 1)]
    got = masking.neighbour_secrets(
        enc, mask, [(v, e.public, keys.load_public(m.public)) for v, e, m in peers], round_id=rid, own_id=7
    )
    want = [
        (
            masking.channel_key(enc, e.public, round_id=rid, own_id=7, peer_id=v),
            masking.pairwise_seed(mask, m.public, round_id=rid, own_id=7, peer_id=v),
        )
        for v, e, m in peers
    ]
    assert got == want
    # and each side of a pair derives the same secrets
    v, e, m = peers[0]
    back = masking.neighbour_secrets(e, m, [(7, enc.public, mask.public)], round_id=rid, own_id=v)
    assert back == [want[0]]
    for bad in (-1, 2**32, 1.5):
        with pytest.raises(ParameterError, match="'id'"):
            masking.neighbour_secrets(enc, mask, [(bad, e.public, m.public)], round_id=rid, own_id=7)
