"""The coalition observer (an active server colluding with c clients, sums of at least m clients).

Oracles, all independent of the accountant's code:
* the LITERAL adversary enumerated on small rounds: every check-in (and, with enforcement, roster) pattern of
  the n clients, every colluder strategy, every subset of honest participants the server may keep in the sum
  (at least m clients with the colluders it includes), with the colluders' inputs and noise removed; the
  Rényi divergence of each kept sum is computed exactly from the noise pmf (Skellam: scipy.stats.skellam;
  discrete Gaussian: the normalised pmf on a support whose omitted mass is checked negligible, convolved);
* the Gaussian closed form of Balle & Wang (2018, Thm 8) for the PLD method at k_eff = 1;
* the server certificate (the coalition sees at least what the server sees) and its equality at c = 0, m = n.
"""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import optimize, stats

from secagg_dp.accounting.checkin import (
    CheckinAccountant,
    CheckinRound,
    Coalition,
    DDGSum,
    GaussianSum,
    LocalStepsGaussian,
    SkellamSum,
    SubsampledCheckin,
    checkin_pld,
    checkin_rdp,
    coalition_certificate,
    coalition_view_provider,
    server_certificate,
    server_view_provider,
)
from secagg_dp.accounting.checkin.enforced import EnforcedSkellamSum
from secagg_dp.errors import ParameterError

ORDERS = np.array([2, 3, 4, 6, 8])
DELTA_SENS = 2  # inputs +1 and -1 on the integer grid: replace-one sensitivity 2 (clip C = 1)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # best order at the largest offered: not under test here
        yield


# --- exact noise pmfs and Rényi divergences -------------------------------------------------------------


def _support(var: float) -> np.ndarray:
    half = int(2 * ORDERS.max() + 60 * math.sqrt(var) + 60)
    return np.arange(-half, half + 1)


@functools.cache
def _skellam_pmf(var: float) -> tuple[np.ndarray, np.ndarray]:
    z = _support(var)
    p = stats.skellam.pmf(z, var / 2.0, var / 2.0)
    assert abs(p.sum() - 1.0) < 1e-12  # the omitted mass is negligible
    return z, p


@functools.cache
def _ddg_sum_pmf(sigma: float, shares: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum of ``shares`` discrete Gaussians N_Z(0, sigma^2): exact normalised pmf, convolved."""
    half = int(60 * sigma + 20)
    z1 = np.arange(-half, half + 1)
    w = np.exp(-(z1.astype(float) ** 2) / (2 * sigma**2))
    # omitted mass beyond the support: sum_{|z| > half} e^{-z^2/2s^2} <= 2 e^{-half^2/2s^2} / (1 - e^{-half/s^2})
    omitted = 2 * math.exp(-(half**2) / (2 * sigma**2)) / (1 - math.exp(-half / sigma**2))
    assert omitted / w.sum() < 1e-300 or omitted == 0.0
    p = w / w.sum()
    out = p
    for _ in range(shares - 1):
        out = np.convolve(out, p)
    z = np.arange(-half * shares, half * shares + 1)
    return z, out


def _renyi_shift(z: np.ndarray, p: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """D_a(x + Z || x' + Z), x - x' = 2, exact on the support (both pmfs on the same grid)."""
    q = np.zeros_like(p)
    q[DELTA_SENS:] = p[:-DELTA_SENS]  # Q(z) = P(z - 2)
    keep = (p > 0) & (q > 0)
    out = []
    for a in orders:
        terms = a * np.log(p[keep]) + (1 - a) * np.log(q[keep])
        peak = terms.max()
        # the omitted edge terms are negligible against the peak (the terms are log-quadratic-like in z)
        assert terms[0] < peak - 300 and terms[-1] < peak - 300
        out.append((peak + math.log(np.exp(terms - peak).sum())) / (a - 1))
    return np.array(out)


@functools.cache
def _d_skellam(var: float) -> tuple[float, ...]:
    return tuple(_renyi_shift(*_skellam_pmf(var), ORDERS))


@functools.cache
def _d_ddg(sigma: float, shares: int) -> tuple[float, ...]:
    return tuple(_renyi_shift(*_ddg_sum_pmf(sigma, shares), ORDERS))


# --- the literal adversary ----------------------------------------------------------------------------


def _literal_rdp(n, gamma, co, divergence, strategy, roster_rate=None):
    """Exact per-round RDP of the coalition's view (all flags, roster, K, kept sum minus colluders).

    Client 0 is the target, clients 1..c the colluders, the rest honest. Honest clients are in the sum w.p.
    gamma and (with enforcement, ``roster_rate`` r) in the roster but dropped w.p. r - gamma. Colluders
    follow ``strategy``: "honest" (the same random states), "in" (always in the sum) or "dropped" (always in
    the roster, never in the sum). The server keeps any subset S of the honest participants and j of the
    colluders in the sum with |S| + j >= m (rounds with fewer than m participants abort); the patterns are
    revealed and data independent, so the worst strategy maximises the divergence per pattern.
    ``divergence(shares, roster)`` is the exact D_a of the kept sum with ``shares`` honest noise shares."""
    c, m = co.colluders, co.min_sum
    states = ("out", "in") if roster_rate is None else ("out", "dropped", "in")
    prob = (
        {"out": 1 - gamma, "in": gamma}
        if roster_rate is None
        else {
            "out": 1 - roster_rate,
            "dropped": roster_rate - gamma,
            "in": gamma,
        }
    )
    colluder_choices = {
        "honest": list(itertools.product(states, repeat=c)),
        "in": [("in",) * c],
        "dropped": [("dropped",) * c],
    }[strategy]
    moment = np.zeros(ORDERS.size)
    for honest in itertools.product(states, repeat=n - c):
        for coll in colluder_choices:
            w = math.prod(prob[s] for s in honest)
            if strategy == "honest":
                w *= math.prod(prob[s] for s in coll)
            if w == 0.0:
                continue
            present = [i for i, s in enumerate(honest) if s == "in"]  # honest indices, 0 = target
            p_c = sum(s == "in" for s in coll)
            roster = sum(s != "out" for s in honest + coll)
            worst = np.zeros(ORDERS.size)
            if 0 in present and len(present) + p_c >= m:  # target in, the round can finish
                others = [i for i in present if i != 0]
                for size in range(len(others) + 1):
                    for chosen in itertools.combinations(others, size):
                        for j in range(p_c + 1):
                            if len(chosen) + 1 + j >= m:  # S = chosen + target, j colluders
                                worst = np.maximum(worst, divergence(len(chosen) + 1, roster))
                            # subsets without the target: Y independent of its input, D = 0
            moment += w * np.exp((ORDERS - 1) * worst)
    return np.log(moment) / (ORDERS - 1)


CASES = [  # (n, gamma, colluders, min_sum)
    (5, 0.5, 0, 1),
    (5, 0.5, 1, 2),
    (6, 0.4, 2, 3),
    (6, 0.7, 1, 4),
    (4, 0.6, 3, 2),
]


@pytest.mark.parametrize(("n", "gamma", "c", "m"), CASES)
@pytest.mark.parametrize("strategy", ["honest", "in"])
def test_skellam_certificate_covers_the_literal_adversary(n, gamma, c, m, strategy):
    v = 20.0  # small per-client Skellam variance (grid units), where Agarwal, Kairouz & Liu's bound is close
    co = Coalition(c, m)
    mech = SkellamSum(v, 2.0, 2.0)
    exact = _literal_rdp(n, gamma, co, lambda shares, _r: np.array(_d_skellam(shares * v)), strategy)
    cert = checkin_rdp(coalition_view_provider(mech, n, co), n, gamma, ORDERS)
    assert np.all(cert >= exact - 1e-12), (cert, exact)
    if strategy == "honest":  # the server view (k shares) does not cover the coalition: the oracle can bite
        assert np.any(checkin_rdp(server_view_provider(mech, n), n, gamma, ORDERS) < exact)


@pytest.mark.parametrize(("n", "gamma", "c", "m"), CASES[:4])
def test_ddg_certificate_covers_the_literal_adversary(n, gamma, c, m):
    sigma = 3.0
    co = Coalition(c, m)
    mech = DDGSum(sigma, 1, 2.0, 2.0)
    exact = _literal_rdp(n, gamma, co, lambda shares, _r: np.array(_d_ddg(sigma, shares)), "honest")
    cert = checkin_rdp(coalition_view_provider(mech, n, co), n, gamma, ORDERS)
    # at c = 0, m = 1 (k_eff = 1) the bound is the single discrete Gaussian's exact RDP: equal up to rounding
    assert np.all(cert >= exact * (1 - 1e-9)), (cert, exact)
    assert np.any(checkin_rdp(server_view_provider(mech, n), n, gamma, ORDERS) < exact)


@pytest.mark.parametrize(("n", "gamma", "r", "c", "m"), [(5, 0.4, 0.7, 1, 2), (5, 0.5, 0.8, 0, 3), (4, 0.3, 0.9, 2, 3)])
@pytest.mark.parametrize("strategy", ["honest", "in", "dropped"])
def test_enforced_certificate_covers_the_literal_adversary(n, gamma, r, c, m, strategy):
    """Add-then-remove: every removable group removed, each honest kept client keeps level 0, mu / N."""
    mu = 60.0
    co = Coalition(c, m)
    exact = _literal_rdp(
        n, gamma, co, lambda shares, roster: np.array(_d_skellam(shares * mu / roster)), strategy, roster_rate=r
    )
    mech = EnforcedSkellamSum(mu, 2.0, 2.0, n, 0.3, r, gamma)
    cert = checkin_rdp(coalition_view_provider(mech, n, co), n, gamma, ORDERS)
    assert np.all(cert >= exact - 1e-12), (cert, exact)
    # the level-0 model is what the coalition gets: the tolerance-based enforced base is below it here
    server = checkin_rdp(server_view_provider(mech, n), n, gamma, ORDERS)
    assert np.all(cert >= server)


def test_epsilon_delta_level_against_the_literal_adversary():
    """One round: the exact hockey-stick divergence of the literal view at the certificate's epsilon is at
    most its delta (Skellam, n = 5, c = 1, m = 2; per revealed pattern the worst kept subset), and at half
    that epsilon above it (the certificate is within a factor 2 of the literal adversary's epsilon)."""
    n, gamma, v, co, delta = 5, 0.5, 30.0, Coalition(1, 2), 1e-3
    cert = coalition_certificate(SkellamSum(v, 2.0, 2.0), n, gamma, 1, delta, co, np.arange(2, 65))

    def hockey(shares: int, eps: float) -> float:
        z, p = _skellam_pmf(shares * v)
        q = np.zeros_like(p)
        q[DELTA_SENS:] = p[:-DELTA_SENS]
        return float(np.maximum(p - math.exp(eps) * q, 0.0).sum())

    def exact(eps: float) -> float:  # enumeration as in _literal_rdp; the hockey stick splits over patterns too
        total = 0.0
        for honest in itertools.product((0, 1), repeat=n - 1):  # honest[0]: the target
            for coll in (0, 1):  # the colluder, checking in like an honest client
                w = math.prod(gamma if s else 1 - gamma for s in (*honest, coll))
                present = sum(honest)
                if honest[0] and present + coll >= co.min_sum:
                    # kept honest shares s (target included) with s + j >= m for some j <= coll
                    allowed = [s for s in range(1, present + 1) if s + coll >= co.min_sum]
                    total += w * max(hockey(s, eps) for s in allowed)
        return total

    assert exact(cert.epsilon) <= cert.delta
    assert exact(cert.epsilon / 2) > cert.delta


# --- against the server certificate -------------------------------------------------------------------


def _mechanisms(n: int) -> list:
    return [
        GaussianSum(1.0),
        SkellamSum(40.0, 2.0, 4.0),
        DDGSum(3.0, 4, 2.0, 4.0),
        LocalStepsGaussian(1.0, 1),
        LocalStepsGaussian(1.5, 3),
        EnforcedSkellamSum(400.0, 2.0, 4.0, n, 0.2, 0.5, 0.3),
    ]


@pytest.mark.parametrize("mech_index", range(6))
def test_coalition_is_never_below_the_server_and_equals_it_at_c0_m_n(mech_index):
    n, gamma, orders = 40, 0.3, np.arange(2, 65)
    mech = _mechanisms(n)[mech_index]
    nb = getattr(mech, "neighbouring", "replace-one")
    server = checkin_rdp(server_view_provider(mech, n, nb), n, gamma, orders)
    prev = None
    for co in (Coalition(0, n), Coalition(0, 8), Coalition(2, 8), Coalition(8, 8)):
        coal = checkin_rdp(coalition_view_provider(mech, n, co, nb), n, gamma, orders)
        assert np.all(coal >= server * (1 - 1e-12))
        if prev is not None:  # more colluders or a smaller min_sum: never smaller
            assert np.all(coal >= prev * (1 - 1e-12))
        prev = coal
        if co.colluders == 0 and co.min_sum == n and not isinstance(mech, EnforcedSkellamSum):
            np.testing.assert_array_equal(coal, server)  # k_eff(k) = k: the server view exactly


@pytest.mark.parametrize("method", ["rdp", "window", "pld"])
def test_accountant_coalition_at_least_server_and_names_it(method):
    n, gamma, t, delta = 60, 0.3, 5, 1e-5
    ev = CheckinRound(SubsampledCheckin(GaussianSum(1.0), n), n, gamma, None, "replace-one")
    server = CheckinAccountant(method, observer="server").compose(ev, t).certificate(delta)
    same = CheckinAccountant(method, observer="coalition", coalition=Coalition(0, n)).compose(ev, t)
    assert same.certificate(delta).epsilon == pytest.approx(server.epsilon, rel=1e-12)
    acc = CheckinAccountant(method, observer="coalition", coalition=Coalition(2, 10)).compose(ev, t)
    cert = acc.certificate(delta)
    assert cert.observer == "coalition" and cert.certificate
    assert cert.detail["colluders"] == 2 and cert.detail["min_sum"] == 10
    assert cert.epsilon > server.epsilon
    assert acc.fresh().coalition == Coalition(2, 10)
    assert acc.get_epsilon(delta) == cert.epsilon


def test_pld_coalition_at_k_eff_one_matches_the_gaussian_closed_form():
    """c >= m: k_eff = 1, each round is w.p. gamma one client's Gaussian (std sigma, sensitivity 2) and
    nothing otherwise, so delta(eps) = gamma delta_G(eps) for T = 1 (Balle & Wang 2018, Thm 8)."""
    from scipy.stats import norm

    n, gamma, sigma, delta = 30, 0.2, 3.0, 1e-6
    pld = checkin_pld(n, gamma, sigma, 1, delta, observer="coalition", coalition=Coalition(4, 4))
    s = sigma / DELTA_SENS

    def d(eps: float) -> float:
        return gamma * (norm.cdf(1 / (2 * s) - eps * s) - math.exp(eps) * norm.cdf(-1 / (2 * s) - eps * s)) - delta

    exact = optimize.brentq(d, 0.0, 20.0)
    assert exact <= pld.epsilon <= exact * 1.02
    assert pld.as_dict()["observer"] == "coalition" and pld.as_dict()["colluders"] == 4


def test_coalition_certificate_labels():
    n = 20
    co = Coalition(1, 5)
    cert = coalition_certificate(GaussianSum(1.0), n, 0.3, 3, 1e-5, co, np.arange(2, 33))
    d = cert.as_dict()
    assert d["observer"] == "coalition" and d["colluders"] == 1 and d["min_sum"] == 5 and d["certificate"]
    srv = server_certificate(GaussianSum(1.0), n, 0.3, 3, 1e-5, np.arange(2, 33))
    assert cert.epsilon >= srv.epsilon and "colluders" not in srv.as_dict()


# --- bad inputs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 3), "colluders"),
        ((0, 0), "min_sum"),
        ((1.5, 3), "colluders"),
        ((True, 3), "colluders"),
        ((0, 2.0), "min_sum"),
    ],
)
def test_coalition_refuses_bad_parameters(args, match):
    with pytest.raises(ParameterError, match=match):
        Coalition(*args)


def test_observer_coalition_needs_its_coalition():
    with pytest.raises(ParameterError, match="'coalition' is required"):
        CheckinAccountant("rdp", observer="coalition")
    with pytest.raises(ParameterError, match="'coalition' is for observer 'coalition' only"):
        CheckinAccountant("rdp", observer="server", coalition=Coalition(1, 2))
    with pytest.raises(ParameterError, match="must be a Coalition"):
        CheckinAccountant("rdp", observer="coalition", coalition=(1, 2))  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="min_sum"):
        coalition_view_provider(GaussianSum(1.0), 5, Coalition(0, 6))
    with pytest.raises(ParameterError, match="'coalition' is required"):
        checkin_pld(10, 0.5, 1.0, 1, 1e-5, observer="coalition")
    with pytest.raises(ParameterError, match="observer 'coalition' only"):
        checkin_pld(10, 0.5, 1.0, 1, 1e-5, observer="server", coalition=Coalition(0, 1))
    ev = CheckinRound(SubsampledCheckin(GaussianSum(1.0), 5), 5, 0.5, None, "replace-one")
    acc = CheckinAccountant("rdp", observer="coalition", coalition=Coalition(0, 6))
    assert not acc.supports(ev)  # min_sum above the round's n: refused, naming it


def test_tightest_method_for_the_coalition():
    from secagg_dp.accounting.checkin import tightest_method

    n, gamma, t, delta = 60, 0.3, 5, 1e-5
    ev = CheckinRound(SubsampledCheckin(GaussianSum(1.0), n), n, gamma, None, "replace-one")
    co = Coalition(2, 10)
    best, eps = tightest_method(ev, t, delta, observer="coalition", coalition=co)
    _, server = tightest_method(ev, t, delta, observer="server")
    assert set(eps) == {"rdp", "window", "pld"} and eps[best] == min(eps.values())
    assert all(eps[m] > server[m] for m in eps)
    single = CheckinAccountant(best, observer="coalition", coalition=co).compose(ev, t).get_epsilon(delta)
    assert single == eps[best]
