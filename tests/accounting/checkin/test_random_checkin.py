"""Random check-ins: the certificate against the literal mechanism, enumerated exactly on small cases.

Oracles: exact output distributions of the literal mechanism (every allocation of every client enumerated,
Skellam pmfs from scipy.stats, adversarial datasets of the other clients enumerated), exact Rényi divergences and
hockey-stick deltas over the whole output space (truncated at |y| <= 24: Skellam tails below 1e-14 at the
variances used); Gaussian hockey-stick
deltas by 2-D quadrature (scipy.integrate); pld-accounting (Feldman & Shenfeld 2025) for the anchors.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, special, stats

from secagg_dp.accounting.checkin.bases import DDGSum, GaussianSum, SkellamSum
from secagg_dp.accounting.checkin.coalition import Coalition
from secagg_dp.accounting.checkin.random_checkin import (
    CentralGaussian,
    RandomCheckinAccountant,
    RandomCheckinEpoch,
    random_checkin_analyst_rdp,
    random_checkin_pld,
    random_checkin_rdp,
)
from secagg_dp.accounting.core.accountant import UnsupportedEventError
from secagg_dp.errors import ParameterError

Y = 24
ORDERS = np.array([2, 3, 4, 6, 8])


def _skellam(var: float) -> np.ndarray:
    y = np.arange(-Y, Y + 1)
    return stats.skellam.pmf(y, var / 2.0, var / 2.0)


def _ddg_sum(sigma: float, k: int) -> np.ndarray:
    """pmf on [-Y, Y] of the sum of k discrete Gaussians N_Z(0, sigma^2), by brute-force convolution."""
    y = np.arange(-Y, Y + 1)
    one = np.exp(-(y**2) / (2.0 * sigma**2))
    one /= one.sum()
    out = one
    for _ in range(k - 1):
        out = np.convolve(out, one)[Y : 3 * Y + 1]  # the centre [-Y, Y] of the 4Y + 1 support
    return out


def _outputs(
    n: int, gamma: float, m: int, b: int, var: float, values: tuple[int, ...], analyst: bool, ddg: bool = False
) -> dict:
    """Exact law of the literal epoch: keys (allocation) for the server, (k_1..k_m) for the analyst; value the
    joint pmf of (y_1..y_m) on [-Y, Y]^m (shifts beyond the window only lose far-tail mass)."""
    subsets = list(itertools.combinations(range(m), b))
    choices = [None, *subsets]
    out: dict = {}
    for alloc in itertools.product(choices, repeat=n):
        w = 1.0
        for c in alloc:
            w *= (1.0 - gamma) if c is None else gamma / len(subsets)
        if w == 0.0:
            continue
        counts = [sum(1 for c in alloc if c is not None and j in c) for j in range(m)]
        shifts = [sum(values[i] for i, c in enumerate(alloc) if c is not None and j in c) for j in range(m)]
        pmf = np.ones(())
        for j in range(m):
            if counts[j] == 0:
                base = np.eye(1, 2 * Y + 1, Y)[0]
            else:
                base = _ddg_sum(math.sqrt(var), counts[j]) if ddg else _skellam(counts[j] * var)
            pmf = np.multiply.outer(pmf, np.roll(base, shifts[j]))
        key = tuple(counts) if analyst else alloc
        out[key] = out.get(key, 0.0) + w * pmf
    return out


def _renyi(p: dict, q: dict, a: int) -> float:
    tot = 0.0
    for k, pk in p.items():
        qk = q[k]
        mask = (pk > 1e-250) & (qk > 1e-250)  # below: the truncated far tail (pmf underflow)
        tot += float(np.sum(np.exp(a * np.log(pk[mask]) + (1.0 - a) * np.log(qk[mask]))))
    return math.log(tot) / (a - 1.0)


def _hockey(p: dict, q: dict, eps: float) -> float:
    return sum(float(np.sum(np.maximum(p[k] - math.exp(eps) * q[k], 0.0))) for k in p)


CASES = [  # (n, gamma, m, b, variance)
    (2, 1.0, 2, 1, 1.0),
    (3, 0.5, 2, 1, 1.0),
    pytest.param(3, 0.7, 3, 1, 0.5, marks=pytest.mark.slow),
    (3, 1.0, 3, 2, 1.0),
    pytest.param(3, 0.6, 3, 2, 2.0, marks=pytest.mark.slow),
    pytest.param(4, 0.5, 2, 1, 0.5, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("n", "gamma", "m", "b", "var"), CASES)
def test_rdp_certificate_dominates_exact_renyi(n: int, gamma: float, m: int, b: int, var: float) -> None:
    """Server and analyst exact Rényi <= their certificates, both directions, every dataset of the others in
    {-1, 0, 1}^(n-1) (replace-one: target +1 -> -1, sensitivity 2); the analyst's is never above the server's."""
    ev = RandomCheckinEpoch(SkellamSum(var, 2.0, 2.0), n, gamma, m, b)
    cert = random_checkin_rdp(ev, ORDERS)
    cert_analyst = random_checkin_analyst_rdp(ev, ORDERS)
    assert np.all(cert_analyst <= cert)
    cert_coal = random_checkin_rdp(ev, ORDERS, Coalition(0, n))
    np.testing.assert_allclose(cert_coal, cert, rtol=1e-9)  # c = 0, min_sum = n: k_eff(k) = k
    worst = np.zeros(ORDERS.size)
    worst_analyst = np.zeros(ORDERS.size)
    others_sets = list(itertools.product((-1, 0, 1), repeat=n - 1))[: 9 if m == 2 else 2]
    for others in others_sets:
        for analyst, w in ((False, worst), (True, worst_analyst)):
            p = _outputs(n, gamma, m, b, var, (1, *others), analyst)
            q = _outputs(n, gamma, m, b, var, (-1, *others), analyst)
            for i, a in enumerate(ORDERS):
                w[i] = max(w[i], _renyi(p, q, int(a)), _renyi(q, p, int(a)))
    assert np.all(cert >= worst - 1e-12), (cert, worst)
    assert np.all(cert_analyst >= worst_analyst - 1e-12), (cert_analyst, worst_analyst)
    if b == 1:  # exact identity for the server (revealed flag, K' ~ Bin(n-1, gamma/m)) up to the base's bound
        assert np.all(worst > 0.0)


@pytest.mark.parametrize(("n", "gamma", "m", "b", "sigma"), [(3, 0.5, 2, 1, 1.0), (3, 1.0, 3, 2, 0.8)])
def test_rdp_certificate_dominates_exact_renyi_ddg(n: int, gamma: float, m: int, b: int, sigma: float) -> None:
    """The same with distributed discrete Gaussian shares (Kairouz, Liu & Steinke 2021 bound, dim 1)."""
    ev = RandomCheckinEpoch(DDGSum(sigma, 1, 2.0, 2.0), n, gamma, m, b)
    certs = {False: random_checkin_rdp(ev, ORDERS), True: random_checkin_analyst_rdp(ev, ORDERS)}
    for analyst, cert in certs.items():
        worst = np.zeros(ORDERS.size)
        for others in [(1, -1), (0, 0)]:
            p = _outputs(n, gamma, m, b, sigma**2, (1, *others), analyst, ddg=True)
            q = _outputs(n, gamma, m, b, sigma**2, (-1, *others), analyst, ddg=True)
            for i, a in enumerate(ORDERS):
                worst[i] = max(worst[i], _renyi(p, q, int(a)), _renyi(q, p, int(a)))
        assert np.all(worst > 0.0)
        assert np.all(cert >= worst - 1e-12), (analyst, cert, worst)


class _ExactSkellamBase:
    """Exact Rényi divergence of Skellam(k v) shifted by 2 against unshifted (symmetric), from scipy's pmf on
    [-60, 60]: a base whose 'bound' is exact, so that the decomposition alone is tested."""

    neighbouring = "replace-one"

    def __init__(self, var: float) -> None:
        self.var = var

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        y = np.arange(-60, 61)
        out = []
        for k in np.atleast_1d(k_lo):
            p = stats.skellam.pmf(y - 2, k * self.var / 2.0, k * self.var / 2.0)
            q = stats.skellam.pmf(y, k * self.var / 2.0, k * self.var / 2.0)
            m = (p > 1e-250) & (q > 1e-250)
            lp, lq = np.log(p[m]), np.log(q[m])
            out.append([special.logsumexp(a * lp + (1 - a) * lq) / (a - 1.0) for a in np.asarray(orders)])
        return np.asarray(out, dtype=np.float64)


@pytest.mark.parametrize(("n", "gamma", "m", "b"), [(3, 0.5, 2, 1), (3, 0.7, 3, 1), (3, 1.0, 3, 2), (3, 0.6, 2, 2)])
def test_decomposition_alone_with_an_exact_base(n: int, gamma: float, m: int, b: int) -> None:
    """With the exact per-k divergence as the base, the server certificate equals the exact server divergence
    for one slot (the revealed-flag identity) and bounds it for two (negative association)."""
    var = 1.0
    ev = RandomCheckinEpoch(_ExactSkellamBase(var), n, gamma, m, b)
    cert = random_checkin_rdp(ev, ORDERS)
    p = _outputs(n, gamma, m, b, var, (1, 0, 0), False)
    q = _outputs(n, gamma, m, b, var, (-1, 0, 0), False)
    exact = np.array([_renyi(p, q, int(a)) for a in ORDERS])
    assert np.all(cert >= exact - 1e-9), (cert, exact)
    if b == 1:
        np.testing.assert_allclose(cert, exact, rtol=1e-6)


@pytest.mark.parametrize(
    ("n", "gamma", "m", "b"),
    [
        (3, 0.5, 2, 1),
        (3, 0.2, 2, 1),
        (3, 0.6, 2, 2),
        pytest.param(4, 0.3, 2, 1, marks=pytest.mark.slow),
        # the closest of a sweep of 120 settings (n <= 4, m <= 3, b <= 2, five gammas, three variances): every
        # client in both rounds, gamma near 1; the margin to the exact divergence is about 0.06 here
        (4, 0.95, 2, 2),
    ],
)
def test_analyst_amplification_alone_with_an_exact_base(n: int, gamma: float, m: int, b: int) -> None:
    """With the exact per-k divergence as the base, the analyst's curve (epoch coin, Wang, Balle &
    Kasiviswanathan 2019, Thm 9) bounds the exact analyst divergence over every dataset of the others in
    {-1, 0, 1}^(n-1), both directions, and is strictly below the server's at every order: the amplification is
    engaged, so a bound that over-credited it would fail here (at (3, 0.6, 2, 2) the margin is under 2 %)."""
    var = 1.0
    ev = RandomCheckinEpoch(_ExactSkellamBase(var), n, gamma, m, b)
    cert = random_checkin_analyst_rdp(ev, ORDERS)
    server = random_checkin_rdp(ev, ORDERS)
    assert np.all(cert < server), (cert, server)
    worst = np.zeros(ORDERS.size)
    for others in itertools.product((-1, 0, 1), repeat=n - 1):
        p = _outputs(n, gamma, m, b, var, (1, *others), True)
        q = _outputs(n, gamma, m, b, var, (-1, *others), True)
        for i, a in enumerate(ORDERS):
            worst[i] = max(worst[i], _renyi(p, q, int(a)), _renyi(q, p, int(a)))
    assert np.all(cert >= worst - 1e-9), (cert, worst)


def test_analyst_curve_is_the_servers_where_nothing_is_hidden() -> None:
    """gamma = 1 (every client takes part: nothing for the epoch coin to hide) and add-remove (Theorem 9 is a
    replace-one result) give the server's curve; at n = 10^6, m = 1000, gamma = 0.05 the analyst's is smaller."""
    full = RandomCheckinEpoch(SkellamSum(4.0, 2.0, 2.0), 50, 1.0, 5)
    np.testing.assert_array_equal(random_checkin_analyst_rdp(full, ORDERS), random_checkin_rdp(full, ORDERS))
    central = RandomCheckinEpoch(CentralGaussian(1.0), 50, 0.5, 5, neighbouring="add-remove")
    np.testing.assert_array_equal(random_checkin_analyst_rdp(central, ORDERS), random_checkin_rdp(central, ORDERS))
    big = RandomCheckinEpoch(DDGSum(20.0, 1000, 20.0, 200.0), 10**6, 0.05, 1000)
    assert np.all(random_checkin_analyst_rdp(big, ORDERS) < random_checkin_rdp(big, ORDERS))


@pytest.mark.parametrize("b", [1, 2])
def test_analyst_count_grid_only_adds(b: int) -> None:
    """The participant-count grid (ratio 1.005, exact below K ~ 200) bounds the same mixture evaluated at every K
    exactly (no grid, the library's SubsampledCheckin over the allocation stage at each K), within 1 %."""
    from secagg_dp.accounting.checkin import random_checkin as rc
    from secagg_dp.accounting.checkin.mixture import SubsampledCheckin, checkin_mixture

    ev = RandomCheckinEpoch(SkellamSum(5.0, 2.0, 2.0), 5000, 0.05, 100, b)  # K ~ 250: the grid coarsens here
    orders = np.array([2, 3, 5, 8, 16, 32])

    class _EveryK:  # eps_2 at each K, no grid
        neighbouring = "replace-one"

        def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, o: np.ndarray) -> np.ndarray:
            oo = tuple(int(x) for x in o)
            return np.array([rc._stage_curve(ev, int(k), oo) for k in np.atleast_1d(k_lo)])

    exact = checkin_mixture(SubsampledCheckin(_EveryK(), ev.clients), ev.clients, ev.gamma, orders).log_sm1
    exact_rdp = np.minimum(np.logaddexp(0.0, exact) / (orders - 1.0), random_checkin_rdp(ev, orders))
    got = random_checkin_analyst_rdp(ev, orders)
    assert np.all(got < random_checkin_rdp(ev, orders))  # the amplified part is what is compared
    assert np.all(got >= exact_rdp * (1 - 1e-12)), (got, exact_rdp)
    assert np.all(got <= exact_rdp * 1.01), (got, exact_rdp)


def test_server_identity_b1_is_tight_for_gaussian_central() -> None:
    """b = 1, central Gaussian: e^{(a-1) eps} = 1 - gamma + gamma e^{(a-1) a Delta^2/(2 sigma^2)} exactly."""
    ev = RandomCheckinEpoch(CentralGaussian(2.0, "replace-one"), 5, 0.3, 4, 1, "replace-one")
    a = ORDERS.astype(float)
    exact = np.log1p(0.3 * np.expm1((a - 1.0) * a * 4.0 / 8.0)) / (a - 1.0)
    np.testing.assert_allclose(random_checkin_rdp(ev, ORDERS), exact, rtol=1e-12)


def test_hockey_stick_of_literal_mechanism_below_certificate() -> None:
    """Exact hockey-stick delta of the server view at the RDP certificate's epsilon is <= delta."""
    n, gamma, m, b, var = 3, 0.6, 3, 1, 1.0
    ev = RandomCheckinEpoch(SkellamSum(var, 2.0, 2.0), n, gamma, m, b)
    acc = RandomCheckinAccountant(observer="server", method="rdp", orders=np.arange(2, 64)).compose(ev)
    p = _outputs(n, gamma, m, b, var, (1, 1, -1), False)
    q = _outputs(n, gamma, m, b, var, (-1, 1, -1), False)
    for delta in (1e-2, 1e-3):
        eps = acc.get_epsilon(delta)
        assert max(_hockey(p, q, eps), _hockey(q, p, eps)) <= delta


def _allocation_delta(sigma: float, m: int, gamma: float, eps: float) -> float:
    """max over directions of the hockey-stick delta of central random allocation (add-remove, m = 2):
    dP/dQ = 1 - gamma + gamma (X_1 + X_2)/2, X_j = exp((y_j - 1/2)/sigma^2), y ~ N(0, sigma^2) under Q.
    Given X_1 the X_2-expectation is in closed form (lognormal partial moments, E X = 1:
    E[X 1{X > k}] = Phi(d1), P(X > k) = Phi(d1 - a), d1 = (a^2/2 - ln k)/a, a = 1/sigma); the X_1-integral
    by adaptive quadrature (scipy.integrate.quad)."""
    assert m == 2
    a, e, g = 1.0 / sigma, math.exp(eps), gamma / 2.0

    def d1(k: float) -> float:
        return (a * a / 2.0 - math.log(k)) / a

    def rem(z: float) -> float:  # E[(1 - gamma + g (x1 + X2) - e)_+ | x1], z ~ N(0, 1), x1 = exp(a z - a^2/2)
        c = e - (1.0 - gamma) - g * math.exp(a * z - a * a / 2.0)
        if c <= 0.0:
            return g - c
        k = c / g
        return g * special.ndtr(d1(k)) - c * special.ndtr(d1(k) - a)

    def add(z: float) -> float:  # E[(1 - e (1 - gamma + g (x1 + X2)))_+ | x1]
        d = 1.0 - e * (1.0 - gamma) - e * g * math.exp(a * z - a * a / 2.0)
        if d <= 0.0:
            return 0.0
        k = d / (e * g)
        return d * special.ndtr(-(d1(k) - a)) - e * g * special.ndtr(-d1(k))

    phi = stats.norm.pdf
    r = integrate.quad(lambda z: phi(z) * rem(z), -14, 14, epsabs=1e-14, epsrel=1e-11, limit=400)[0]
    ad = integrate.quad(lambda z: phi(z) * add(z), -14, 14, epsabs=1e-14, epsrel=1e-11, limit=400)[0]
    return max(r, ad)


@pytest.mark.parametrize(("sigma", "gamma", "eps0"), [(1.0, 1.0, 0.8), (0.7, 0.6, 1.0)])
def test_central_allocation_pld_brackets_quadrature(sigma: float, gamma: float, eps0: float) -> None:
    """At delta* = delta_exact(eps0) the certificate is >= eps0 and epsilon_lower <= eps0."""
    dstar = _allocation_delta(sigma, 2, gamma, eps0)
    assert 1e-6 < dstar < 0.2
    ev = RandomCheckinEpoch(CentralGaussian(sigma), 10, gamma, 2, 1, "add-remove")
    r = random_checkin_pld([(ev, 1)], dstar)
    assert r.route == "allocation"
    assert r.epsilon >= eps0 - 1e-9
    assert r.epsilon_lower <= eps0 + 1e-9
    assert r.epsilon - r.epsilon_lower < 0.05


def test_server_pld_central_matches_gaussian_closed_form() -> None:
    """Server, central, b slots: gamma x the Gaussian pair of mu = sqrt(b)/sigma (Balle & Wang 2018, Thm 8)."""
    sigma, gamma, b = 1.5, 0.4, 2
    ev = RandomCheckinEpoch(CentralGaussian(sigma), 10, gamma, 4, b, "add-remove")
    mu = math.sqrt(b) / sigma
    eps0 = 0.5
    exact = gamma * (special.ndtr(-eps0 / mu + mu / 2) - math.exp(eps0) * special.ndtr(-eps0 / mu - mu / 2))
    r = random_checkin_pld([(ev, 1)], exact, observer="server")
    assert r.epsilon_lower - 1e-6 <= eps0 <= r.epsilon + 1e-9


def test_analyst_never_above_server_and_coalition_never_below_server() -> None:
    ev = RandomCheckinEpoch(GaussianSum(2.0), 200, 0.5, 10, 1)
    server = random_checkin_pld([(ev, 3)], 1e-5, observer="server").epsilon
    coal = random_checkin_pld([(ev, 3)], 1e-5, observer="coalition", coalition=Coalition(5, 20)).epsilon
    assert coal > server
    central = RandomCheckinEpoch(CentralGaussian(1.0), 200, 1.0, 10, 1, "add-remove")
    assert (
        random_checkin_pld([(central, 1)], 1e-5).epsilon
        < random_checkin_pld([(central, 1)], 1e-5, observer="server").epsilon
    )


def test_validation_and_accountant_contract() -> None:
    with pytest.raises(ParameterError, match="slots"):
        RandomCheckinEpoch(GaussianSum(1.0), 10, 0.5, 3, 4)
    with pytest.raises(ParameterError, match="gamma"):
        RandomCheckinEpoch(GaussianSum(1.0), 10, 0.0, 3, 1)
    with pytest.raises(ParameterError, match="mechanism"):
        RandomCheckinEpoch(GaussianSum(1.0), 10, 0.5, 3, 1, "add-remove")
    with pytest.raises(ParameterError, match="method"):
        RandomCheckinAccountant(method="window")
    acc = RandomCheckinAccountant(method="pld", observer="server")
    with pytest.raises(UnsupportedEventError):
        acc.compose(RandomCheckinEpoch(SkellamSum(10.0, 2.0, 2.0), 10, 0.5, 3, 1))
    ev = RandomCheckinEpoch(GaussianSum(3.0), 100, 0.5, 5, 1)
    cert = acc.compose(ev, 4).certificate(1e-5)
    assert cert.certificate and cert.detail["epsilon_lower"] <= cert.epsilon
    rdp = RandomCheckinAccountant(method="rdp", observer="server").compose(ev, 4).get_epsilon(1e-5)
    assert cert.epsilon <= rdp  # the PLD is the tighter certificate of the same view
    assert acc.get_delta(cert.epsilon) <= 1.0001e-5
    assert acc.get_delta(cert.epsilon * 0.8) > 1e-5
    with pytest.raises(ParameterError, match="amplified"):
        RandomCheckinAccountant(method="rdp", amplified="yes")  # type: ignore[arg-type]
    # the analyst's accountant composes the analyst curve (amplified=False: the server's), independently summed
    wide = np.arange(2, 129)
    low = RandomCheckinEpoch(SkellamSum(40.0, 2.0, 2.0), 400, 0.1, 4, 1)
    analyst = RandomCheckinAccountant(method="rdp", orders=wide).compose(low, 3).compose(ev)
    plain = RandomCheckinAccountant(method="rdp", orders=wide, amplified=False).compose(low, 3).compose(ev)
    server = RandomCheckinAccountant(method="rdp", observer="server", orders=wide).compose(low, 3).compose(ev)
    c = analyst.certificate(1e-5)
    assert c.detail["route"] == "amplified" and plain.certificate(1e-5).detail["route"] == "revealed"
    curve = 3 * random_checkin_analyst_rdp(low, wide) + random_checkin_analyst_rdp(ev, wide)
    from secagg_dp.accounting.core.conversion import rdp_to_dp

    assert c.epsilon == pytest.approx(rdp_to_dp(wide, curve, 1e-5)[0], rel=1e-12)
    assert plain.get_epsilon(1e-5) == server.get_epsilon(1e-5) > c.epsilon
    assert analyst.fresh().amplified and not plain.fresh().amplified


def _pld_accounting() -> object:
    return pytest.importorskip(
        "PLD_accounting", reason="pld-accounting (Feldman & Shenfeld 2025) not installed: pip install pld-accounting"
    )


@pytest.mark.slow
@pytest.mark.parametrize(("m", "epochs", "acc"), [(100, 1, -1.0), (100, 10, -1.0), (1000, 1, 0.02)])
def test_anchor_inside_pld_accounting_bracket(m: int, epochs: int, acc: float) -> None:
    """--noise central, add-remove, sigma = 1, delta = 1e-5: lower_FS <= ours <= upper_FS."""
    pa = _pld_accounting()
    upper, lower = pa.gaussian_allocation_epsilon_range(  # type: ignore[attr-defined]
        delta=1e-5, sigma=1.0, num_steps=m, num_epochs=epochs, epsilon_accuracy=acc
    )
    ev = RandomCheckinEpoch(CentralGaussian(1.0), 10**6, 1.0, m, 1, "add-remove")
    ours = random_checkin_pld([(ev, epochs)], 1e-5).epsilon
    assert lower <= ours <= upper, (lower, ours, upper)


def test_registered_in_the_accountant_registry() -> None:
    from secagg_dp.accounting import ACCOUNTANTS, make_accountant

    for name, method in (("random-checkin-pld", "pld"), ("random-checkin-rdp", "rdp")):
        acc = make_accountant(name, observer="server")
        assert isinstance(acc, RandomCheckinAccountant) and acc.method == method and acc.observer == "server"
        assert type(acc.fresh()) is type(acc)
    with pytest.raises(ParameterError, match="method"):
        ACCOUNTANTS["random-checkin-pld"](method="rdp")
    ev = RandomCheckinEpoch(SkellamSum(4.0, 2.0, 2.0), 20, 0.5, 4, 2)
    a = make_accountant("random-checkin-rdp", observer="server", orders=ORDERS).compose(ev, 2)
    expected = 2 * random_checkin_rdp(ev, ORDERS)
    from secagg_dp.accounting import rdp_to_dp

    assert a.get_epsilon(1e-5) == pytest.approx(rdp_to_dp(ORDERS, expected, 1e-5, warn=False)[0], rel=1e-12)
