"""Shuffled check-in: Gaussian (seed 003 Thms 2-3, seed 001 Thm 2) and generic LDP (seed 001 Sec. 3, seed 000)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammaln, logsumexp
from scipy.stats import binom

from secagg_dp.accounting.core.conversion import pure_dp_to_rdp
from secagg_dp.accounting.shuffle import ldp as ls
from secagg_dp.accounting.shuffle import shuffled_checkin as sc
from secagg_dp.errors import ParameterError


def wbk_log_moments(base: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """log A(λ), λ = 2..L, of WBK19 Thm 9 written term by term (independent of the core's BLAS kernel).

    ``base[k, j-2]`` = ε_k(j), j = 2..L; ``rate`` per row k."""
    L = base.shape[1] + 1
    lr = np.log(rate)[:, None]
    out = np.empty((base.shape[0], L - 1))
    for lam in range(2, L + 1):
        j = np.arange(3, lam + 1, dtype=float)
        t2 = (
            2 * lr[:, 0]
            + math.log(lam * (lam - 1) / 2)
            + np.minimum(math.log(4) + np.log(np.expm1(base[:, 0])), math.log(2) + base[:, 0])
        )
        rest = (
            math.log(2)
            + j[None, :] * lr
            + (gammaln(lam + 1) - gammaln(j + 1) - gammaln(lam - j + 1))[None, :]
            + (j[None, :] - 1) * base[:, 1 : lam - 1]
        )
        out[:, lam - 2] = logsumexp(np.concatenate([np.zeros((base.shape[0], 1)), t2[:, None], rest], axis=1), axis=1)
    return out


def test_pair_lower_single_user_closed_form():
    # n = 1: nothing (prob 1−γ) or one report N(0,σ²) vs N(1,σ²): moment (1−γ) + γ e^{λ(λ−1)/(2σ²)}.
    o = np.arange(2, 12)
    got = sc.shuffled_checkin_gaussian_rdp_pair_lower(o, n=1, gamma=0.3, sigma=2.0)
    want = np.log(0.7 + 0.3 * np.exp(o * (o - 1) / 8.0)) / (o - 1)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_windowed_upper_matches_full_sum():
    # Independent full sum over every k with a term-by-term WBK Thm 9 (not the core's BLAS kernel).
    n, g, s, o = 60, 0.2, 1.5, np.arange(2, 11)
    ks = np.arange(1, n + 1)
    base = np.broadcast_to(np.arange(2, 11) / (2 * s * s), (n, 9))
    lm = wbk_log_moments(np.ascontiguousarray(base), ks / n)
    w = binom.pmf(ks, n, g)
    want = np.log(binom.pmf(0, n, g) + (w[:, None] * np.exp(lm)).sum(0)) / (o - 1)
    got = sc.shuffled_checkin_gaussian_rdp_windowed(o, n=n, gamma=g, sigma=s, base="gaussian-upper")
    assert np.all(got >= want * (1 - 1e-12))  # the tail blocks may only add
    # the rigorous tail blocks (mass ≤ 1e-12 × worst moment) add at most a few 1e-8 here
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_ordering_lower_estimate_upper():
    o = np.arange(2, 17)
    kw = dict(n=3000, gamma=0.05, sigma=3.0)
    low = sc.shuffled_checkin_gaussian_rdp_pair_lower(o, **kw)
    est = sc.shuffled_checkin_gaussian_rdp_windowed(o, **kw)
    up = sc.shuffled_checkin_gaussian_rdp_windowed(o, base="gaussian-upper", **kw)
    assert np.all(low <= est * (1 + 1e-9)) and np.all(est <= up * (1 + 1e-9))
    che = sc.shuffled_checkin_gaussian_rdp_chernoff(o, **kw)
    assert np.all(np.isfinite(che)) and np.all(che > 0)


def test_subsampled_shuffle_gaussian_m_equals_n_is_wbk_of_base():
    o = np.arange(2, 9)
    got = sc.subsampled_shuffle_gaussian_rdp(o, m=5, n=10, sigma=1.0)
    assert np.all(got > 0) and np.all(np.diff(got) > 0)
    with pytest.raises(ParameterError):
        sc.subsampled_shuffle_gaussian_rdp(o, m=11, n=10, sigma=1.0)


def test_fmt_validity_range_and_formula():
    # ε0 = 2, δ1 = 1e-4: valid only for n ≥ 16·log(2e4)·e² ≈ 1171 (seed 001 Eq. 8 condition).
    e, d = ls.fmt_shuffle(2.0, 1e-8, np.array([100, 10**6]), 1e-4)
    assert e[0] == 2.0 and d[0] == 1e-8  # no amplification outside the range
    n = 10**6
    want = math.log1p(
        math.expm1(2) / (math.exp(2) + 1) * (8 * math.sqrt(math.exp(2) * math.log(4e4)) / 1e3 + 8 * math.exp(2) / n)
    )
    assert e[1] == pytest.approx(want, rel=1e-14)
    assert d[1] == pytest.approx(1e-4 + (math.exp(2) + 1) * (1 + math.exp(-2) / 2) * n * 1e-8, rel=1e-14)


def test_dp_to_rdp_is_randomized_response():
    # δ = 0 Lemma 1 value = RR Rényi divergence (closed form), and λ → large tends to ε.
    p = math.e / (1 + math.e)
    for lam in (2, 7):
        rr = math.log(p**lam * (1 - p) ** (1 - lam) + (1 - p) ** lam * p ** (1 - lam)) / (lam - 1)
        assert pure_dp_to_rdp(1.0, [lam])[0] == pytest.approx(rr, rel=1e-13)
    assert pure_dp_to_rdp(1.0, [1e6])[0] == pytest.approx(1.0, rel=1e-5)
    # vectorised over epsilon (the LDP approaches convert one epsilon per client count k)
    eps = np.array([0.5, 1.0, 2.0])
    assert np.allclose(pure_dp_to_rdp(eps, [2.0, 7.0]), np.stack([pure_dp_to_rdp(e, [2.0, 7.0]) for e in eps]))


def test_ldp_approaches_and_first_cut_give_finite_upper_bounds():
    kw = dict(n=10**4, gamma=1e-3, rounds=100, delta=1e-4)
    a1 = ls.approach_epsilon(2.0, 1e-8, approach=1, **kw)
    a2 = ls.approach_epsilon(2.0, 1e-8, approach=2, **kw)
    fc = ls.first_cut_epsilon(2.0, 1e-8, **kw)
    assert 0 < a1.epsilon < 2.0 * 100 and 0 < a2.epsilon and 0 < fc.epsilon
    # check-in with no shuffling gain is still below plain composition of ε0 over 100 rounds
    assert a1.epsilon < 10


def test_seed000_lower_below_upper():
    o = np.arange(2, 20)
    up = ls.seed000_upper_rdp(1.0, n=10**6, gamma=1e-3, orders=o)
    lo = ls.seed000_lower_rdp(1.0, n=10**6, gamma=1e-3, orders=o)
    assert np.all(lo <= up) and np.all(lo > 0)


@pytest.mark.parametrize("method", ["first-cut", "approach1", "approach2"])
def test_ldp_approaches_are_estimates_not_certificates(method):
    # delta0 is carried through shuffling, sampling and the check-in mixture by a step no cited result proves
    import contextlib
    import io
    import json

    from simulations.cli import main

    argv = ["account", "shuffled-checkin", "--n", "1000", "--gamma", "0.1", "--rounds", "2", "--delta", "1e-5"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv + ["--eps0", "1", "--delta0", "1e-9", "--method", method, "--json"])
    doc = json.loads(out.getvalue())
    assert code == 0 and doc["certificate"] is False and doc["bound"] == "estimate"
    assert any("not a certificate" in c for c in doc["caveats"])
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        main(argv + ["--eps0", "1", "--delta0", "1e-9", "--method", method])
    assert "(NOT a certificate)" in text.getvalue() and "(certificate)" not in text.getvalue()
