"""PLD check-in accountant: oracles (dp-accounting, brute force over subsets), bounds, monotonicity, errors."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from secagg_dp.accounting.checkin.pld import (
    PLDCertificate,
    calibrate_checkin_pld,
    checkin_pld,
    checkin_round_delta,
    epsilon_for_delta,
    wor_gaussian_delta,
)
from secagg_dp.errors import ParameterError

dpa_pld = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
EPS = np.array([-1.0, -0.3, -0.05, 0.0, 0.02, 0.1, 0.4, 1.0, 2.0])


# (0.5, 2.0) and (0.01, 1.5) take ~1 s each: CI only; the quick loop keeps a small and a full sampling rate
@pytest.mark.parametrize(
    "q,std",
    [
        (0.1, 3.0),
        pytest.param(0.5, 2.0, marks=pytest.mark.slow),
        (1.0, 2.0),
        pytest.param(0.01, 1.5, marks=pytest.mark.slow),
    ],
)
def test_per_k_profile_matches_dp_accounting(q: float, std: float) -> None:
    # dp-accounting's Poisson-subsampled Gaussian PLD takes the max over its add and remove pairs; its remove
    # pair (q N(2, std^2) + (1-q) N(0, std^2), N(0, std^2)) is Zhu-Dong-Wang's pair, so the symmetrised
    # profiles coincide for every real eps (up to its 1e-4 discretisation).
    ref = dpa_pld.from_gaussian_mechanism(std, sensitivity=2.0, sampling_prob=q, value_discretization_interval=1e-4)
    np.testing.assert_allclose(wor_gaussian_delta(q, std, EPS), ref.get_delta_for_epsilon(EPS), rtol=2e-3, atol=1e-7)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of the mu-GDP Gaussian pair (Balle & Wang 2018, Thm 8), by root finding."""
    from scipy.optimize import brentq

    def f(e: float) -> float:
        return stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta

    return brentq(f, 0.0, 100.0, xtol=1e-14, rtol=1e-14)


@pytest.mark.parametrize("rounds", [1, 10])
def test_fixed_k_matches_exact_gaussian_and_dp_accounting(rounds: int) -> None:
    # gamma = 1: K = n always, every round is the Gaussian (std sigma sqrt(n), sensitivity 2), T rounds compose
    # to mu = 2 sqrt(T) / (sigma sqrt(n)). Exact epsilon from Balle & Wang's formula; dp-accounting's
    # pessimistic PLD (interval 1e-4) is the same kind of certificate.
    n, sigma, delta = 4, 1.5, 1e-5
    cert = checkin_pld(n, 1.0, sigma, rounds, delta)
    exact = _gaussian_epsilon(2.0 * math.sqrt(rounds) / (sigma * math.sqrt(n)), delta)
    assert exact <= cert.epsilon <= exact * (1 + 1e-4)
    assert cert.epsilon_optimistic <= exact * (1 + 1e-9)
    ref = dpa_pld.from_gaussian_mechanism(sigma * math.sqrt(n), sensitivity=2.0, value_discretization_interval=1e-4)
    assert cert.epsilon == pytest.approx(ref.self_compose(rounds).get_epsilon_for_delta(delta), rel=1e-4)


def _true_delta(xs: tuple[float, ...], x_alt: float, gamma: float, sigma: float, eps: np.ndarray) -> np.ndarray:
    """Exact delta(eps) of one round of the real mechanism (analyst view) for D = xs and D' = xs with the first
    value replaced by x_alt: enumerate check-in subsets, integrate |p_D - e^eps p_D'|_+ on a fine grid."""
    n = len(xs)
    y = np.linspace(-12.0, 12.0, 200001)
    out = np.zeros(eps.shape)
    for k in range(1, n + 1):
        pd = np.zeros(y.shape)
        pa = np.zeros(y.shape)
        for s in itertools.combinations(range(n), k):
            w = gamma**k * (1 - gamma) ** (n - k)
            m = sum(xs[i] for i in s)
            ma = m - (xs[0] - x_alt if 0 in s else 0.0)
            sd = sigma * math.sqrt(k)
            pd += w * stats.norm.pdf(y, m, sd)
            pa += w * stats.norm.pdf(y, ma, sd)
        for i, e in enumerate(eps):
            out[i] += np.trapezoid(np.maximum(pd - math.exp(e) * pa, 0.0), y)
    return out


@pytest.mark.parametrize("others", [(0.0, 0.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 0.5)])
def test_round_profile_bounds_brute_force(others: tuple[float, float]) -> None:
    # Upper bound on the exact hockey-stick divergence of concrete neighbours (target +1 -> -1, adversarial
    # others), both directions, eps >= 0 and < 0 (composition needs every eps).
    gamma, sigma = 0.5, 0.6
    eps = np.array([-0.5, 0.0, 0.1, 0.5, 1.0, 2.0])
    ours = checkin_round_delta(3, gamma, sigma, eps, tail_budget=1e-300)
    for x, xa in ((1.0, -1.0), (-1.0, 1.0)):
        true = _true_delta((x, *others), xa, gamma, sigma, eps)
        assert np.all(true <= ours + 1e-9), (true, ours)
    # and it is attained up to the pair looseness: the bound is not vacuous at eps = 0.5
    worst = _true_delta((1.0, 0.0, 0.0), -1.0, gamma, sigma, eps)
    assert ours[3] < 1.6 * worst[3]


def test_server_view_bounds_brute_force() -> None:
    # Server view, one round: the server sees whether the target took part; exact delta of target +1 vs -1
    # with others at 0 is gamma * (Gaussian delta of k = 1 + Bin(n-1, gamma) clients), computed here directly.
    n, gamma, sigma = 3, 0.4, 0.8
    eps = np.array([0.0, 0.3, 1.0])
    exact = np.zeros(eps.shape)
    for j in range(n):
        w = gamma * math.comb(n - 1, j) * gamma**j * (1 - gamma) ** (n - 1 - j)
        sd = sigma * math.sqrt(j + 1)
        mu = 2.0 / sd
        exact += w * (stats.norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))
    ours = checkin_round_delta(n, gamma, sigma, eps, observer="server", tail_budget=1e-300)
    np.testing.assert_allclose(ours, exact, rtol=1e-9, atol=1e-15)


# Reference values (origin recorded in the JSON file): (n, gamma, delta, T, tight upper, one-pair lower bound).
_REF = json.loads((Path(__file__).parent / "vectors" / "pld_checkin_reference.json").read_text())
TABLE = [(int(r[0]), r[1], r[2], int(r[3]), r[6], r[7]) for r in _REF["rows"]]


def _check_row(n: int, gamma: float, delta: float, t: int, tight: float, lower: float) -> None:
    cert = checkin_pld(n, gamma, 1.0, t, delta)
    # never below the one-pair lower bound; at most 2% above the independent tight value (rounded to its
    # printed digits, hence the half-unit allowance on the 3-significant-digit entries)
    assert cert.epsilon >= lower
    assert cert.epsilon <= 1.02 * tight
    assert lower * 0.98 <= cert.epsilon_optimistic <= cert.epsilon


@pytest.mark.parametrize("row", [TABLE[0], TABLE[1], TABLE[4], TABLE[5]])
def test_reference_table_fast_rows(row: tuple) -> None:
    _check_row(*row)


@pytest.mark.slow
@pytest.mark.parametrize("row", [TABLE[2], TABLE[3], TABLE[6], TABLE[7]])
def test_reference_table_slow_rows(row: tuple) -> None:
    _check_row(*row)


def test_tighter_than_window_certificate() -> None:
    # The reference "window" column (same mechanism, RDP path) for n = 10^4, gamma = 0.1, T = 10: 0.1148.
    assert checkin_pld(10**4, 0.1, 1.0, 10, 1e-4).epsilon < _REF["rows"][1][5] / 2


def test_monotone_in_rounds_and_sigma() -> None:
    n, gamma, delta = 2000, 0.05, 1e-6
    by_t = [checkin_pld(n, gamma, 1.0, t, delta).epsilon for t in (1, 3, 10, 30)]
    assert all(a < b for a, b in zip(by_t, by_t[1:], strict=False))
    by_s = [checkin_pld(n, gamma, s, 10, delta).epsilon for s in (0.5, 1.0, 2.0)]
    assert all(a > b for a, b in zip(by_s, by_s[1:], strict=False))


def test_server_at_least_analyst_and_equal_at_gamma_one() -> None:
    a = checkin_pld(1000, 0.05, 1.0, 10, 1e-6)
    s = checkin_pld(1000, 0.05, 1.0, 10, 1e-6, observer="server")
    assert s.epsilon > a.epsilon
    assert s.observer == "server" and a.observer == "analyst"
    # gamma = 1: both observers see every client every round; the two computations must agree
    a1 = checkin_pld(5, 1.0, 1.0, 4, 1e-6)
    s1 = checkin_pld(5, 1.0, 1.0, 4, 1e-6, observer="server")
    assert s1.epsilon == pytest.approx(a1.epsilon, rel=1e-9)


def test_tail_mass_is_charged_not_dropped() -> None:
    cert = checkin_pld(10**4, 0.1, 1.0, 100, 1e-4, tail_fraction=0.01)
    assert 0.0 < cert.delta_tail <= 0.01 * 1e-4 / 2 * 1.0001
    # a tail budget at the whole delta leaves nothing for the mechanism: epsilon grows
    loose = checkin_pld(10**4, 0.1, 1.0, 100, 1e-4, tail_fraction=0.5)
    assert loose.delta_tail > cert.delta_tail
    assert loose.epsilon >= cert.epsilon * (1 - 1e-3)


def test_epsilon_for_delta_matches_dp_accounting() -> None:
    rng = np.random.default_rng(7)
    from dp_accounting.pld import pld_pmf

    for _ in range(20):
        size = int(rng.integers(2, 300))
        probs = rng.random(size) ** 4
        probs /= probs.sum() * 1.0001
        lower = int(rng.integers(-200, 50))
        inf = float(rng.random() * 1e-4)
        pmf = pld_pmf.DensePLDPmf(0.01, lower, probs, inf, True)
        for delta in (1e-3, 1e-2, 0.1):
            ref = pmf.get_epsilon_for_delta(delta)
            got = epsilon_for_delta((np.arange(size) + lower) * 0.01, probs, inf, delta)
            assert got == pytest.approx(ref, rel=1e-9, abs=1e-12)


def test_calibration_meets_target_and_is_near_smallest() -> None:
    sigma, cert = calibrate_checkin_pld(10**3, 0.1, 10, 1e-5, 0.5)
    assert cert.epsilon <= 0.5
    assert checkin_pld(10**3, 0.1, sigma * 0.99, 10, 1e-5).epsilon > 0.5


@pytest.mark.parametrize(
    "args",
    [
        (10**3, 0.3, 20, 1e-5, 1.0, "analyst"),
        (10**4, 0.1, 10, 1e-5, 1.0, "server"),
        (10**5, 0.01, 1, 1e-6, 1.0, "analyst"),
    ],
)
def test_calibration_closes_with_two_certificates(args: tuple) -> None:
    """The estimate puts the first certificate within rel_tol of the crossing: one above the target and one
    below close the bracket (the fewest possible), and they bracket the returned sigma within rel_tol."""
    n, gamma, rounds, delta, target, observer = args
    seen: list[tuple[str, float, float]] = []
    sigma, cert = calibrate_checkin_pld(
        n, gamma, rounds, delta, target, observer=observer, progress=lambda st, i, s, e: seen.append((st, s, e))
    )
    certs = [(s, e) for st, s, e in seen if st == "certificate"]
    assert len(certs) == 2
    (s_ok, e_ok), (s_bad, e_bad) = sorted(certs, reverse=True)
    assert (s_ok, e_ok) == (sigma, cert.epsilon) and e_ok <= target < e_bad
    assert sigma / (1.0 + 1e-3) <= s_bad < sigma


def test_estimate_is_close_to_the_certificate() -> None:
    """The extrapolated estimate is within 0.5 % of the certificate's epsilon (the coarse grid alone is about
    2 % above it), and far from the target only the coarse grid is evaluated (its value is returned)."""
    from secagg_dp.accounting.checkin.pld import _COARSE_POINTS, _discretised, _estimated_epsilon, _setup

    n, gamma, rounds, delta = 10**4, 0.1, 10, 1e-5
    for sigma in (0.11, 0.12):
        cert = checkin_pld(n, gamma, sigma, rounds, delta).epsilon
        est = _estimated_epsilon(n, gamma, sigma, rounds, delta, "analyst", cert)
        assert abs(est / cert - 1.0) < 5e-3
        c, top, trunc = _setup(n, gamma, sigma, rounds, delta, "analyst", 1e-3, 1e-4)
        coarse = _discretised(c, top, top / _COARSE_POINTS, rounds, delta, trunc)[0]
        assert abs(est / cert - 1.0) < abs(coarse / cert - 1.0)
        assert _estimated_epsilon(n, gamma, sigma, rounds, delta, "analyst", 10.0 * cert) == coarse


def test_result_record() -> None:
    cert = checkin_pld(100, 0.1, 1.0, 2, 1e-5)
    d = cert.as_dict()
    assert d["method"] == "pld" and d["observer"] == "analyst" and d["certificate"] is True
    assert d["neighbouring"] == "replace-one" and "tail_handling" in d
    assert d["epsilon_optimistic"] <= d["epsilon"]
    with pytest.raises(ParameterError, match="observer"):
        PLDCertificate(1.0, 1.0, 1e-5, 1, 1.0, 10, 0.1, "client", (0, 1), 1, 0.0, 0.0, 1e-4)


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"n": 0}, "n"),
        ({"gamma": 0.0}, "gamma"),
        ({"gamma": 1.5}, "gamma"),
        ({"sigma": -1.0}, "sigma"),
        ({"rounds": 0}, "rounds"),
        ({"delta": 1.0}, "delta"),
        ({"observer": "everyone"}, "observer"),
        ({"discretization": 0.0}, "discretization"),
        ({"discretization": 1e-12}, "discretization"),
    ],
)
def test_bad_input_names_parameter(kwargs: dict, name: str) -> None:
    args = {"n": 100, "gamma": 0.1, "sigma": 1.0, "rounds": 2, "delta": 1e-5} | kwargs
    with pytest.raises(ParameterError, match=f"'{name}'"):
        checkin_pld(**args)


def _round_up_epsilon(n: int, gamma: float, rounds: int, delta: float, h: float) -> float:
    """Independent certificate of the same mixture PLD: every loss rounded UP to a fine grid (pure
    pessimistic rounding, no Connect-the-Dots), mass above the grid to +infinity, composed by dp-accounting."""
    from dp_accounting.pld import pld_pmf

    from secagg_dp.accounting.checkin import pld as mod

    budget = 1e-3 * delta / (2 * rounds)
    c = mod._components(n, gamma, 1.0, "analyst", budget, 1e-4)
    m = int(math.ceil(mod._grid_top(c, budget) / h))
    idx = np.arange(-m, m + 1)
    surv = np.minimum.accumulate(np.clip(mod._profile_and_survival(c, idx * h)[1], 0.0, 1.0))  # omega(loss >= eps)
    probs = np.empty(idx.size)
    probs[0] = 1.0 - surv[1]  # (-inf, eps_1) -> eps_1 (index shift below)
    probs[1:-1] = surv[1:-1] - surv[2:]  # [eps_j, eps_j+1) -> eps_j+1
    pmf = pld_pmf.create_pmf(
        dict(zip((idx[:-1] + 1).tolist(), np.maximum(probs[:-1], 0.0).tolist(), strict=True)), h, surv[-1], True
    )  # [eps_m, inf) -> +infinity
    comp = pmf.to_dense_pmf().self_compose(rounds, tail_mass_truncation=1e-15)
    return comp.get_epsilon_for_delta(delta)


def test_connect_the_dots_agrees_with_plain_round_up() -> None:
    # Plain rounding up on a grid 2.5x finer is an independent upper bound with bias <= T h; the certificate
    # must sit between the optimistic value and it (plus that bias), and both below the reference "tight" value 0.0455.
    n, gamma, delta, t = 10**4, 0.1, 1e-4, 10
    cert = checkin_pld(n, gamma, 1.0, t, delta)
    up = _round_up_epsilon(n, gamma, t, delta, 2e-6)
    assert cert.epsilon_optimistic <= cert.epsilon <= up + 1e-9
    assert up - cert.epsilon <= t * 2e-6
    assert up < 0.0455


@pytest.mark.slow  # over 5 s: runs in CI, not in the quick loop
def test_default_grid_refines_when_the_slack_is_large() -> None:
    # n gamma = 0.1: epsilon is far below the largest loss, so the first grid is coarse; refinement (halving h)
    # must give a certificate no larger than the one on the 16x coarser grid and keep optimistic <= certificate.
    fine = checkin_pld(10**6, 1e-7, 1.0, 100, 1e-6)
    coarse = checkin_pld(10**6, 1e-7, 1.0, 100, 1e-6, discretization=16 * fine.discretization)
    assert fine.discretization < coarse.discretization
    assert fine.epsilon_optimistic <= fine.epsilon <= coarse.epsilon
    assert coarse.epsilon_optimistic <= fine.epsilon
