"""Randomized Walsh–Hadamard rotation: oracle = dense scipy.linalg.hadamard; inverse and orthogonality."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg_dp.errors import ParameterError
from secagg_dp.quantize import ZqCodec, fwht, next_pow2, rademacher_signs, rotate, unrotate


@pytest.mark.parametrize("log_d", range(0, 11))
def test_fwht_matches_dense_sylvester_hadamard(log_d: int) -> None:
    # Oracle: scipy.linalg.hadamard builds the Sylvester matrix entry by entry, independent of our butterflies.
    d = 1 << log_d
    h = scipy.linalg.hadamard(d).astype(np.float64) / np.sqrt(d)
    x = np.random.default_rng(log_d).normal(size=(3, d))
    np.testing.assert_allclose(fwht(x), x @ h.T, rtol=0, atol=1e-12 * max(1.0, np.sqrt(d)))
    np.testing.assert_allclose(fwht(x[0]), h @ x[0], rtol=0, atol=1e-12 * max(1.0, np.sqrt(d)))


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
