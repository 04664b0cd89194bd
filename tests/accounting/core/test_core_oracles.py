"""Cross-checks of the RDP curves against dp-accounting (independent implementation) and mpmath."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa
from hypothesis import given, settings
from hypothesis import strategies as st

from secagg_dp.accounting import (
    DEFAULT_ORDERS,
    Gaussian,
    PoissonSampled,
    SampledWithoutReplacement,
    integer_rdp_table,
    poisson_subsampled_gaussian_rdp,
    poisson_subsampled_rdp,
    rdp_to_dp,
    wor_subsampled_gaussian_rdp,
    wor_subsampled_rdp,
)

ORD = DEFAULT_ORDERS
# dp-accounting's WOR Gaussian is O(alpha^2) Python per order: compare on a spread of shared integer orders
WOR_ORD = np.array([2, 3, 4, 5, 6, 8, 11, 16, 23, 32, 45, 64, 96, 128], dtype=np.float64)
# derandomized (fixed examples, no example database): the run time is bounded and a failure is replayable
FAST = settings(max_examples=25, deadline=None, derandomize=True, database=None)


def _close(a, b, rtol, atol=0.0):
    a, b = np.asarray(a), np.asarray(b)
    return np.allclose(a, b, rtol=rtol, atol=atol)


@FAST
@given(z=st.floats(0.3, 50.0), clip=st.floats(0.1, 10.0))
def test_gaussian_matches_dp_accounting(z, clip):
    # oracle: dp-accounting's GaussianDpEvent curve alpha/(2 z^2)
    ours = Gaussian(sigma=z * clip, l2_sensitivity=clip, neighbouring="add-remove").rdp(ORD)
    ref = dpa._compute_rdp_poisson_subsampled_gaussian(1.0, z, ORD)
    assert _close(ours, ref, 1e-9)
    e1, _ = rdp_to_dp(ORD, ours, 1e-5, warn=False)
    e2, _ = dpa.compute_epsilon(ORD, ref, 1e-5)
    assert abs(e1 - e2) <= 1e-6 * max(1.0, e2)


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(z=st.floats(0.5, 20.0), q=st.floats(1e-4, 1.0), steps=st.integers(1, 1000))
def test_poisson_gaussian_matches_dp_accounting(z, q, steps):
    # oracle: dp-accounting PoissonSampledDpEvent(GaussianDpEvent), add/remove, the integer default orders
    # dp-accounting sums log A directly (absolute error ~1e-16 in log A, i.e. ~1e-16/(a-1) in the RDP);
    # ours sums A - 1 (see test_poisson_gaussian_tiny_rdp_mpmath), hence the small absolute slack.
    # Fractional orders are checked against mpmath in test_fractional_orders_exact_mpmath: dp-accounting's
    # fractional series stops at an absolute threshold (and gives up at q = 1/2), so it is only an upper bound.
    ints = ORD[ORD == np.round(ORD)]
    ours = steps * PoissonSampled(q, Gaussian(z, 1.0, "add-remove")).rdp(ints)
    ref = steps * dpa._compute_rdp_poisson_subsampled_gaussian(q, z, ints)
    assert _close(ours, ref, 1e-9, atol=steps * 1e-15)
    e1, _ = rdp_to_dp(ints, ours, 1e-5, warn=False)
    e2, _ = dpa.compute_epsilon(ints, ref, 1e-5)
    assert abs(e1 - e2) <= 1e-6 * max(1.0, e2)


@pytest.mark.parametrize("z_dp,m,steps", [(0.5, 1, 1), (0.5, 999, 7), (0.8, 10, 200), (1.3, 500, 3), (2.0, 37, 50)])
def test_wor_gaussian_matches_dp_accounting_fixed(z_dp, m, steps):
    # the corners of the hypothesis range below (rates 1e-3 .. 0.999, both ends of z_dp), always run
    test_wor_gaussian_matches_dp_accounting.hypothesis.inner_test(z_dp, m, steps)


# dp-accounting's WOR Gaussian costs ~0.05 s per call (O(alpha^2) Python); 10 fixed examples keep this < 2 s
@settings(max_examples=10, deadline=None, derandomize=True, database=None)
@given(z_dp=st.floats(0.5, 2.0), m=st.integers(1, 999), steps=st.integers(1, 200))
def test_wor_gaussian_matches_dp_accounting(z_dp, m, steps):
    # dp-accounting's z is relative to the replace-one sensitivity: our event has sigma = 2*z_dp*C, Δ₂ = 2C,
    # i.e. the user-facing noise multiplier sigma/C is 2*z_dp. Its curve is not capped by the unsubsampled
    # one, so compare with min(ref, alpha/(2 z_dp^2)). z_dp <= 2: its forward differencing is accurate there.
    N = 1000
    ev = SampledWithoutReplacement(m, N, Gaussian(sigma=2 * z_dp, l2_sensitivity=2.0, neighbouring="replace-one"))
    ours = steps * ev.rdp(WOR_ORD)
    ref = steps * np.minimum(dpa._compute_rdp_sample_wor_gaussian(m / N, z_dp, WOR_ORD), WOR_ORD / (2 * z_dp**2))
    assert _close(ours, ref, 1e-9)
    e1, _ = rdp_to_dp(WOR_ORD, ours, 1e-5, warn=False)
    e2, _ = dpa.compute_epsilon(WOR_ORD, ref, 1e-5)
    assert abs(e1 - e2) <= 1e-6 * max(1.0, e2)


def test_wor_gaussian_large_orders_never_above_dp_accounting():
    # above order 256 dp-accounting uses the generic terms only; ours keeps Theorem 27, so it can only be lower
    o = np.array([300.0, 512.0, 1024.0])
    for z, q in [(0.7, 0.01), (1.5, 0.2)]:
        ours = wor_subsampled_gaussian_rdp(z, q, o)
        ref = dpa._compute_rdp_sample_wor_gaussian(q, z, o)
        assert np.all(ours <= ref * (1 + 1e-12))


def _mp_thm27(z, q, alpha):
    """Wang-Balle-Kasiviswanathan 2019 Thm 27 at one integer order, 1200-bit mpmath (the cancellation needs
    < 500 bits here), forward differences by the alternating binomial sum (exact at this precision)."""
    with mp.workprec(1200):
        z, q = mp.mpf(z), mp.mpf(q)
        c = 1 / (2 * z * z)
        g = [mp.e ** (c * i * (i - 1)) for i in range(alpha + 3)]

        def D(ell):
            return mp.fsum((-1) ** (ell - i) * mp.binomial(ell, i) * g[i] for i in range(ell + 1))

        s = 1 + q**2 * mp.binomial(alpha, 2) * min(4 * (mp.e ** (2 * c) - 1), 2 * mp.e ** (2 * c))
        for j in range(3, alpha + 1):
            lo, hi = 2 * (j // 2), 2 * ((j + 1) // 2)
            s += q**j * mp.binomial(alpha, j) * min(4 * mp.sqrt(D(lo) * D(hi)), 2 * mp.e ** (c * (j - 1) * j))
        return min(float(mp.log(s) / (alpha - 1)), alpha / (2 * float(z) ** 2))


@pytest.mark.parametrize("z,q,alpha", [(30.0, 0.5, 149), (30.0, 0.5, 40), (3.0, 0.3, 60), (1.2, 0.05, 90)])
def test_wor_gaussian_thm27_mpmath(z, q, alpha):
    # independent: mpmath evaluation of the theorem itself. At z = 30, alpha = 149 dp-accounting returns 0.409
    # (catastrophic cancellation); the theorem's value is 0.0339.
    ours = wor_subsampled_gaussian_rdp(z, q, [float(alpha)])[0]
    assert ours == pytest.approx(_mp_thm27(z, q, alpha), rel=1e-9)


def _mp_log_sum(terms):
    return mp.log(mp.fsum(terms))


@pytest.mark.parametrize("z,q,a", [(6.0, 1e-4, 232), (20.0, 1e-4, 2), (50.0, 1e-6, 64)])
def test_poisson_gaussian_tiny_rdp_mpmath(z, q, a):
    # RDP ~ 1e-8 .. 1e-17: the log(A - 1) form keeps full relative precision (60-digit mpmath oracle);
    # at (6, 1e-4, 232) dp-accounting's value is 1.2e-9 relative off.
    with mp.workdps(60):
        zz, qq = mp.mpf(z), mp.mpf(q)
        big_a = mp.fsum(
            mp.binomial(a, k) * (1 - qq) ** (a - k) * qq**k * mp.e ** ((k * k - k) / (2 * zz * zz))
            for k in range(a + 1)
        )
        ref = float(mp.log(big_a) / (a - 1))
    assert poisson_subsampled_gaussian_rdp(z, q, [float(a)])[0] == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("z,q", [(0.3, 0.999), (0.5, 1e-6), (50.0, 0.3), (0.2, 0.5)])
def test_poisson_gaussian_order_1024_mpmath(z, q):
    # MTZ19 sum at order 1024 in 200-bit mpmath: no overflow/NaN and agreement to 1e-12
    a = 1024
    with mp.workprec(200):
        zz, qq = mp.mpf(z), mp.mpf(q)
        ref = _mp_log_sum(
            mp.binomial(a, k) * (1 - qq) ** (a - k) * qq**k * mp.e ** ((k * k - k) / (2 * zz * zz))
            for k in range(a + 1)
        ) / (a - 1)
        ref = min(float(ref), a / (2 * z * z))
    ours = poisson_subsampled_gaussian_rdp(z, q, [float(a)])[0]
    assert np.isfinite(ours)
    assert ours == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("z,q", [(0.3, 0.5), (5.0, 1e-3)])
def test_generic_subsampling_order_1024_mpmath(z, q):
    # WBK19 Thm 9 and ZW19 Thm 5 at order 1024 on a Gaussian base curve, 200-bit mpmath
    a = 1024
    table = integer_rdp_table(lambda o: o / (2 * z * z), a)
    wor = wor_subsampled_rdp(table, q, [float(a)])[0]
    poi = poisson_subsampled_rdp(table, q, [float(a)])[0]
    with mp.workprec(200):
        zz, qq = mp.mpf(z), mp.mpf(q)
        eps = lambda j: mp.mpf(j) / (2 * zz * zz)  # noqa: E731
        t = [mp.mpf(1), qq**2 * mp.binomial(a, 2) * min(4 * mp.expm1(eps(2)), 2 * mp.e ** eps(2))]
        t += [2 * qq**j * mp.binomial(a, j) * mp.e ** ((j - 1) * eps(j)) for j in range(3, a + 1)]
        ref_wor = min(float(_mp_log_sum(t) / (a - 1)), a / (2 * z * z))
        u = [(1 - qq) ** (a - 1) * (a * qq - qq + 1), mp.binomial(a, 2) * qq**2 * (1 - qq) ** (a - 2) * mp.e ** eps(2)]
        u += [3 * mp.binomial(a, j) * (1 - qq) ** (a - j) * qq**j * mp.e ** ((j - 1) * eps(j)) for j in range(3, a + 1)]
        ref_poi = min(float(_mp_log_sum(u) / (a - 1)), a / (2 * z * z))
    assert wor == pytest.approx(ref_wor, rel=1e-12)
    assert poi == pytest.approx(ref_poi, rel=1e-12)


def test_broadcasting_matches_scalar_calls():
    # the check-in accountant calls these with k-dependent rates and base tables at once
    rates = np.array([[0.0, 0.01], [0.3, 1.0]])
    zs = np.array([[0.7, 1.3], [2.5, 40.0]])
    batch = wor_subsampled_gaussian_rdp(zs, rates, ORD)
    pb = poisson_subsampled_gaussian_rdp(zs, rates, ORD)
    tables = np.stack([integer_rdp_table(lambda o, z=z: o / (2 * z * z), 1024) for z in zs.ravel()]).reshape(2, 2, -1)
    gb = wor_subsampled_rdp(tables, rates, ORD)
    zb = poisson_subsampled_rdp(tables, rates, ORD)
    assert batch.shape == pb.shape == gb.shape == zb.shape == (2, 2, ORD.size)
    for i in range(2):
        for j in range(2):
            # rows are summed together by BLAS: equal to rounding, not bit for bit
            assert np.allclose(batch[i, j], wor_subsampled_gaussian_rdp(zs[i, j], rates[i, j], ORD), rtol=1e-13, atol=0)
            assert np.allclose(
                pb[i, j], poisson_subsampled_gaussian_rdp(zs[i, j], rates[i, j], ORD), rtol=1e-13, atol=0
            )
            assert np.allclose(gb[i, j], wor_subsampled_rdp(tables[i, j], rates[i, j], ORD), rtol=1e-14, atol=0)
            assert np.allclose(zb[i, j], poisson_subsampled_rdp(tables[i, j], rates[i, j], ORD), rtol=1e-14, atol=0)
    for arr in (batch, pb, gb, zb):
        assert np.all(np.isfinite(arr)) and np.all(arr >= 0)
        assert np.all(arr[0, 0] == 0.0)  # rate 0: nothing released about anyone
    # rate 1: exactly the unsubsampled curve
    assert np.allclose(pb[1, 1], ORD / (2 * 40.0**2), rtol=1e-12)


def test_subsampled_is_capped_by_base_and_generic_dominates_specific():
    z, q = 0.4, 0.9  # Theorem 9 has a noise-independent floor; the cap must bite
    # integer orders: the generic theorems see the base only there (fractional orders interpolate the table)
    ints = ORD[ORD == np.round(ORD)]
    table = integer_rdp_table(lambda o: o / (2 * z * z), 1024)
    base = ints / (2 * z * z)
    for f in (wor_subsampled_rdp, poisson_subsampled_rdp):
        assert np.all(f(table, q, ints) <= base)
    assert np.all(wor_subsampled_gaussian_rdp(z, q, ints) <= wor_subsampled_rdp(table, q, ints) * (1 + 1e-12))
    # the exact Gaussian forms stay below the generic ones at every default order, fractional ones included
    assert np.all(poisson_subsampled_gaussian_rdp(z, q, ORD) <= poisson_subsampled_rdp(table, q, ORD) * (1 + 1e-12))


def _mtz19_exact_rdp(z: float, q: float, alpha: float) -> float:
    """RDP of the Poisson-subsampled Gaussian by 40-digit quadrature of
    A = E_{N(0,z²)}[(1−q + q·e^{(2x−1)/(2z²)})^α]."""
    with mp.workdps(40):
        zz, qq, aa = mp.mpf(z), mp.mpf(q), mp.mpf(alpha)
        f = lambda x: mp.npdf(x, 0, zz) * ((1 - qq) + qq * mp.exp((2 * x - 1) / (2 * zz * zz))) ** aa  # noqa: E731
        # the integrand has a mode near 0 and one near x = α (width z): break the line around both
        pts = sorted({-10 * zz, mp.mpf(0), mp.mpf(0.5), mp.mpf(1), *(aa + k * zz for k in range(-10, 11, 2))})
        return float(mp.log(mp.quad(f, [-mp.inf, *pts, mp.inf])) / (aa - 1))


def _check_fractional(z: float, q: float, orders: list[float]) -> None:
    o = np.array(orders)
    ours = poisson_subsampled_gaussian_rdp(z, q, o)
    exact = np.array([_mtz19_exact_rdp(z, q, a) for a in o])
    assert np.all(ours >= exact * (1 - 1e-13))  # an upper bound up to float64 rounding of the sum
    assert ours == pytest.approx(exact, rel=1e-11)
    with np.errstate(all="ignore"):
        ref = dpa._compute_rdp_poisson_subsampled_gaussian(q, z, o)
    finite = np.isfinite(ref)
    assert np.all(ours[finite] <= ref[finite] * (1 + 1e-9))


@pytest.mark.parametrize(
    "z,q",
    [
        pytest.param(1.3, 0.0025, marks=pytest.mark.slow),  # this and (5.0, 0.5): over ~3 s, CI only
        (1.0, 0.01),
        pytest.param(0.5, 1e-3, marks=pytest.mark.slow),  # this and the next two: over 5 s each
        pytest.param(0.4, 0.9, marks=pytest.mark.slow),
        pytest.param(5.0, 0.5, marks=pytest.mark.slow),
        pytest.param(0.1, 1.024e-5, marks=pytest.mark.slow),
    ],
)
def test_fractional_orders_exact_mpmath(z, q):
    # Mironov-Talwar-Zhang 2019 fractional series with our alternating-tail remainder bound, against the
    # quadrature of the defining integral; never above dp-accounting where its series converges (its stopping
    # rule is an absolute threshold and it gives up at q = 1/2, so it is looser, never tighter, than exact)
    _check_fractional(z, q, [1.1, 1.5, 1.9, 2.5, 10.25])


@pytest.mark.slow
@pytest.mark.parametrize("z,q", [(0.4, 0.9), (0.1, 1.024e-5)])
def test_fractional_large_order_exact_mpmath(z, q):
    _check_fractional(z, q, [33.7])


def test_tf_privacy_dp_sgd_known_answers():
    # tensorflow/privacy compute_dp_sgd_privacy_test.py: (n, batch, z, epochs, delta) -> (eps, order) with their
    # order list [1.25, 1.5, 1.75, 2, 2.25, 2.5, 3, 3.5, 4, 4.5, 5..63, 128, 256, 512] and ceil(epochs n / batch)
    # steps. Test2 needs an order below 2: with integer orders only it would be ~7.5e7.
    tf_orders = np.array([1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 3.0, 3.5, 4.0, 4.5, *range(5, 64), 128, 256, 512], float)
    cases = [
        (60000, 150, 1.3, 15, 1e-5, 0.7242234026109595, 19.0),
        (100000, 100, 1.0, 30, 1e-7, 1.4154988495444845, 13.0),
        (100000000, 1024, 0.1, 10, 1e-7, 5907982.31138195, 1.25),
    ]
    for n, batch, z, epochs, delta, eps_ref, order_ref in cases:
        steps = math.ceil(epochs * n / batch)
        eps, order = rdp_to_dp(
            tf_orders, steps * poisson_subsampled_gaussian_rdp(z, batch / n, tf_orders), delta, warn=False
        )
        assert eps == pytest.approx(eps_ref, rel=1e-9) and order == order_ref
        # the default grid (orders from 1.1) can only do better
        assert rdp_to_dp(ORD, steps * poisson_subsampled_gaussian_rdp(z, batch / n, ORD), delta, warn=False)[0] <= eps


# ell = 600 (3000-bit alternating sums, ~1 s): CI only
@pytest.mark.parametrize(
    "z,ell",
    [(2.0, 10), (5.0, 100), (8.0, 250), (30.0, 200), (500.0, 256), pytest.param(10.0, 600, marks=pytest.mark.slow)],
)
def test_wor_gaussian_forward_differences_mpmath(z, ell):
    # Theorem 27's forward differences by the non-negative series vs the alternating binomial sum in
    # 3000-bit mpmath (exact at this precision); never below, 1e-12 relative
    from secagg_dp.accounting.core.subsampling import _log_even_fd

    with mp.workprec(3000):
        c = 1 / (2 * mp.mpf(z) ** 2)
        ref = float(
            mp.log(mp.fsum((-1) ** (ell - i) * mp.binomial(ell, i) * mp.e ** (c * i * (i - 1)) for i in range(ell + 1)))
        )
    got = _log_even_fd(np.array([1 / (2 * z * z)]), 1026)[0, ell // 2]
    assert got == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert got >= ref - 1e-12 * abs(ref)


def test_wor_gaussian_forward_differences_monotone_in_noise():
    # the series has non-negative coefficients in c = 1/(2 z^2): larger z, smaller differences (used by the
    # check-in block bounds), and rows evaluated together equal rows evaluated alone
    from secagg_dp.accounting.core.subsampling import _log_even_fd

    zs = np.array([3.0, 3.5, 40.0, 41.0, 400.0])
    batch = _log_even_fd(1 / (2 * zs * zs), 258)
    for hi, lo in zip(batch[:-1], batch[1:], strict=True):
        both = np.isfinite(hi) & np.isfinite(lo)
        assert both[1:].any() and np.all(lo[both] <= hi[both])
    for i, z in enumerate(zs):
        alone = _log_even_fd(np.array([1 / (2 * z * z)]), 258)[0]
        assert np.array_equal(np.isfinite(alone), np.isfinite(batch[i]))
        fin = np.isfinite(alone)
        assert np.allclose(alone[fin], batch[i][fin], rtol=1e-13, atol=0)
