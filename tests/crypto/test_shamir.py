"""Shamir over GF(65537): brute-force reconstruction, Python-int oracle for shares, fewer than t raises."""

import itertools
import os

import numpy as np
import pytest

from secagg_dp.crypto import shamir
from secagg_dp.crypto.randomness import SeededRandom, uniform_below
from secagg_dp.errors import ParameterError, ProtocolError

P = shamir.PRIME


def test_prime_is_prime_and_pieces_fit():
    # Trial division (independent of galois).
    assert all(P % d for d in range(2, int(P**0.5) + 1))
    assert (1 << 16) < P


def test_shares_equal_python_int_polynomial_evaluation():
    secret = bytes(range(32))
    t, pts = 4, [1, 2, 7, 65536]
    shares = shamir.share([secret], threshold=t, points=pts, source=SeededRandom(b"\x02" * 32))
    # Recreate the coefficient stream from an identical source and evaluate with Python ints.
    pieces = [int.from_bytes(secret[i : i + 2], "big") for i in range(0, 32, 2)]
    coeffs = uniform_below(SeededRandom(b"\x02" * 32), (t - 1) * 16, P).reshape(t - 1, 16)
    for row, x in zip(shares, pts, strict=True):
        expect = [(pieces[j] + sum(int(coeffs[k - 1, j]) * pow(x, k, P) for k in range(1, t))) % P for j in range(16)]
        assert row.tolist() == expect


def test_lagrange_coefficients_brute_force():
    pts = (3, 5, 11, 65536)
    lam = shamir.lagrange_at_zero(pts)
    for i, xi in enumerate(pts):
        num = den = 1
        for xj in pts:
            if xj != xi:
                num = num * xj % P
                den = den * (xj - xi) % P
        assert int(lam[i]) == num * pow(den, -1, P) % P


@pytest.mark.parametrize("t,n", [(1, 3), (2, 4), (3, 5), (5, 7)])
def test_every_t_subset_reconstructs(t, n):
    secrets = [os.urandom(32), os.urandom(32)]
    pts = np.arange(1, n + 1)
    shares = shamir.share(secrets, threshold=t, points=pts)
    for subset in itertools.combinations(range(n), t):
        sub = list(subset)
        pieces = shamir.reconstruct(pts[sub], shares[sub], threshold=t)
        assert shamir.decode(pieces) == b"".join(secrets)


def test_t51_n100_roundtrip():
    secret = os.urandom(32)
    pts = np.arange(1, 101)
    shares = shamir.share([secret], threshold=51, points=pts)
    sel = np.arange(49, 100)
    assert shamir.decode(shamir.reconstruct(pts[sel], shares[sel], threshold=51)) == secret


def test_fewer_than_t_shares_raise():
    pts = np.arange(1, 6)
    shares = shamir.share([os.urandom(32)], threshold=3, points=pts)
    with pytest.raises(ProtocolError, match="threshold"):
        shamir.reconstruct(pts[:2], shares[:2], threshold=3)


@pytest.mark.parametrize("pts", [[0, 1, 2], [1, 1, 2], [1, 2, P]])
def test_bad_points_refused(pts):
    with pytest.raises(ParameterError):
        shamir.share([b"\x00" * 32], threshold=2, points=pts)


def test_out_of_field_share_refused():
    pts = np.arange(1, 4)
    shares = shamir.share([b"\x00" * 32], threshold=2, points=pts).astype(np.uint32)
    shares[0, 0] = P
    with pytest.raises(ProtocolError):
        shamir.reconstruct(pts, shares, threshold=2)


@pytest.mark.slow
def test_table_arithmetic_matches_galois():
    # Peer-library oracle: galois's GF(65537) (its own JIT-compiled field arithmetic) for the Vandermonde
    # product behind `share` and the Lagrange coefficients behind `reconstruct`, at a large random point set.
    import galois

    gf = galois.GF(P)
    rng = np.random.default_rng(7)
    pts = rng.choice(np.arange(1, P), size=300, replace=False)
    t = 200
    secret = bytes(rng.integers(0, 256, size=64, dtype=np.uint8))
    src = SeededRandom(b"\x05" * 32)
    shares = shamir.share([secret], threshold=t, points=pts, source=src)
    coeffs = uniform_below(SeededRandom(b"\x05" * 32), (t - 1) * 32, P).reshape(t - 1, 32).astype(np.int64)
    pieces = np.frombuffer(secret, dtype=">u2").astype(np.int64)
    full = gf(np.vstack([pieces, coeffs]))
    vander = gf(pts.astype(np.int64))[:, None] ** np.arange(t)[None, :]
    np.testing.assert_array_equal(shares.astype(np.int64), np.asarray(vander @ full, dtype=np.int64))
    chosen = tuple(int(x) for x in pts[:t])
    x = gf(np.array(chosen))
    lam = []
    for i in range(t):
        others = np.delete(x, i)
        lam.append(int(np.prod(others / (others - x[i]))))
    np.testing.assert_array_equal(shamir.lagrange_at_zero(chosen), np.array(lam, dtype=np.int64))
    assert shamir.decode(shamir.reconstruct(pts, shares, threshold=t)) == secret
