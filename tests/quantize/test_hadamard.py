"""Randomized Walsh–Hadamard rotation: oracle = dense scipy.linalg.hadamard; inverse and orthogonality."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg_dp.errors import ParameterError
from secagg_dp.quantize import (
    ZqCodec,
    fwht,
    fwht_butterfly,
    next_pow2,
    rademacher_signs,
    rotate,
    sylvester,
    unrotate,
)


@pytest.mark.parametrize("transform", [fwht, fwht_butterfly])
# d = 2^12 (the Kronecker path's largest size) holds two dense 4096 x 4096 matrices (~270 MB): CI only; the
# quick loop checks d = 2^12 on sampled rows below
@pytest.mark.parametrize("log_d", [*range(0, 12), pytest.param(12, marks=pytest.mark.slow)])
def test_fwht_matches_dense_sylvester_hadamard(transform, log_d: int) -> None:
    # Oracle: scipy.linalg.hadamard builds the Sylvester matrix entry by entry, independent of our butterflies
    # and of our Kronecker factors.
    d = 1 << log_d
    h = scipy.linalg.hadamard(d).astype(np.float64) / np.sqrt(d)
    x = np.random.default_rng(log_d).normal(size=(3, d))
    np.testing.assert_allclose(transform(x), x @ h.T, rtol=0, atol=1e-12 * max(1.0, np.sqrt(d)))
    np.testing.assert_allclose(transform(x[0]), h @ x[0], rtol=0, atol=1e-12 * max(1.0, np.sqrt(d)))


@pytest.mark.parametrize("log_d", [0, 1, 5, 10, 12, 13, 15])
def test_kronecker_fwht_equals_butterfly_to_rounding(log_d: int) -> None:
    # Both compute ±1 combinations of the inputs, in a different order of additions: each output differs by
    # at most a few ulps of the row norm (log2(d) + 2 roundings of sums bounded by ||x||_1 / sqrt(d)).
    d = 1 << log_d
    x = np.random.default_rng(100 + log_d).normal(size=(4, 2, d)) * 1e3
    a, b = fwht(x), fwht_butterfly(x)
    assert a.shape == b.shape == x.shape
    bound = (log_d + 2) * 2.0**-52 * np.abs(x).sum(axis=-1, keepdims=True) / np.sqrt(d)
    assert np.all(np.abs(a - b) <= bound)
    e0 = np.zeros(d)
    e0[0] = d
    np.testing.assert_array_equal(fwht(np.ones(d)) * np.sqrt(d), e0)  # H·1 = d·e_0 exactly (no d x d identity)


@pytest.mark.parametrize("transform", [fwht, fwht_butterfly])
def test_fwht_at_the_kronecker_limit_matches_sylvester_entries_on_sampled_rows(transform) -> None:
    # Oracle: Sylvester's entry formula H[i, j] = (-1)^popcount(i & j) (Sylvester 1867), on 64 sampled rows of
    # the d = 2^12 transform, without building the dense matrix (the full check is the slow case above).
    d = 1 << 12
    rows = np.random.default_rng(12).choice(d, size=64, replace=False)
    popcount = np.array([[bin(int(i) & j).count("1") for j in range(d)] for i in rows])
    h_rows = np.where(popcount % 2 == 0, 1.0, -1.0) / np.sqrt(d)
    x = np.random.default_rng(12).normal(size=(3, d))
    np.testing.assert_allclose(transform(x)[:, rows], x @ h_rows.T, rtol=0, atol=1e-12 * np.sqrt(d))


# d = 4096 (the largest sylvester allows) builds two 4096 x 4096 int64 matrices (~270 MB): CI only
@pytest.mark.parametrize("d", [1, 2, 4, 32, 64, 1024, pytest.param(4096, marks=pytest.mark.slow)])
def test_sylvester_is_scipy_hadamard(d: int) -> None:
    np.testing.assert_array_equal(sylvester(d), scipy.linalg.hadamard(d))
    with pytest.raises(ParameterError):
        sylvester(3)


def test_fwht_does_not_modify_input_and_long_vectors_take_butterfly_stages() -> None:
    x = np.random.default_rng(9).normal(size=(2, 1 << 14))
    keep = x.copy()
    y = fwht(x)
    np.testing.assert_array_equal(x, keep)
    np.testing.assert_allclose(fwht(y), x, atol=1e-12)  # H is its own inverse


def test_rotation_matches_dense_h_times_d() -> None:
    d = 64
    signs = rademacher_signs(123, d)
    dense = scipy.linalg.hadamard(d) / np.sqrt(d) @ np.diag(signs)
    x = np.random.default_rng(0).normal(size=d)
    np.testing.assert_allclose(rotate(x, signs), dense @ x, atol=1e-12)
    np.testing.assert_allclose(unrotate(dense @ x, signs), x, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(dim=st.integers(1, 3000), seed=st.integers(0, 2**64 - 1), n=st.integers(1, 4))
def test_codec_rotation_inverse_and_norm(dim: int, seed: int, n: int) -> None:
    codec = ZqCodec(dim, 16, 1.0, 1.0, rotation_seed=seed)
    x = np.random.default_rng(dim).normal(size=(n, dim)) * 10.0
    y = codec.rotate(x)
    assert y.shape == (n, codec.padded_dim)
    # Orthogonality: the norm is preserved.
    np.testing.assert_allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-12)
    # Inverse: rotation ∘ inverse = identity to 1e-9.
    assert np.max(np.abs(codec.unrotate(y) - x)) <= 1e-9


def test_signs_are_public_deterministic_and_balanced() -> None:
    a = rademacher_signs(5, 1 << 16)
    np.testing.assert_array_equal(a, rademacher_signs(5, 1 << 16))
    assert set(np.unique(a)) == {-1.0, 1.0}
    assert not np.array_equal(a, rademacher_signs(6, 1 << 16))
    # Count of +1 is Binomial(65536, 1/2): |count − 32768| ≤ 5.5·128 fails with probability < 1e-7
    # (normal tail at z = 5.5; Hoeffding gives 2·exp(−2·704²/65536) ≈ 5e-7 ≤ 1e-6 as a rigorous bound).
    assert abs(int((a > 0).sum()) - 32768) <= 704


def test_next_pow2_and_bad_lengths() -> None:
    assert [next_pow2(d) for d in (1, 2, 3, 4, 5, 1000, 1024, 1025)] == [1, 2, 4, 4, 8, 1024, 1024, 2048]
    with pytest.raises(ParameterError):
        fwht(np.ones(6))
    with pytest.raises(ParameterError):
        fwht(np.float64(1.0))
    with pytest.raises(ParameterError):
        next_pow2(0)


@pytest.mark.parametrize("log_d", [0, 1, 2, 5, 10, 12, 13])
def test_hadamard_rows_into_equals_hadamard_rows_bit_for_bit(log_d: int) -> None:
    from secagg_dp.quantize.hadamard import hadamard_rows, hadamard_rows_into

    d = 1 << log_d
    a = np.random.default_rng(log_d).normal(size=(5, d))
    want = hadamard_rows(a)
    got, kept = a.copy(), a.copy()
    hadamard_rows_into(got, got, np.empty_like(got))  # in place
    assert np.array_equal(got, want)
    out = np.empty_like(a)
    hadamard_rows_into(kept, out, np.empty_like(a))  # into another array, the input unchanged
    assert np.array_equal(out, want) and np.array_equal(kept, a)
    wide = np.zeros((5, 2 * d))  # a non-contiguous view takes the copying path, same values
    wide[:, :d] = a
    hadamard_rows_into(wide[:, :d], wide[:, :d], np.empty((5, d)))
    assert np.array_equal(wide[:, :d], want)
