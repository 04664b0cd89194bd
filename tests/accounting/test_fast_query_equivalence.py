"""The accountant query's speed-ups change no value: each fast path against the computation it replaced.

Every reference below is the previous implementation, copied verbatim (or dp-accounting itself), so that a
future edit of the fast path cannot move both sides at once. The values must be *equal* (bit for bit), not
close: the caches and shortcuts are only allowed where they compute the same floating-point numbers.

* pairs: one cell table shared by every call and chunk, sliced and widened on demand, and the normal-CDF
  differences evaluated per branch, against the per-chunk table and the evaluate-every-branch version;
* tails: the deviance series that stops once its steps round to nothing, against 59 fixed steps;
* PLD: the Connect-the-Dots pmf, the FFT composition and the conversion written here, against dp-accounting's
  ``create_pmf_pessimistic_connect_dots`` / ``self_compose`` / ``get_epsilon_for_delta`` chain; tails reused
  across grid halvings and sigma-free components kept across calls, against fresh evaluations;
* PLD: the Chernoff truncation bounds with a copy of SciPy's ``logsumexp`` arithmetic, against SciPy's own
  (and that copy against ``scipy.special.logsumexp`` on random pmfs); the component tails and the two
  compositions on worker threads, against one thread;
* the calibration's contract (certificate at most the target, a failing certificate within ``rel_tol`` below).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import secagg_dp.accounting.checkin.pld as pld
import secagg_dp.accounting.core.pairs as pairs
from secagg_dp.accounting.checkin import tails
from secagg_dp.accounting.checkin.mixture import CHECKIN_ORDERS

# --- pairs -------------------------------------------------------------------------------------------------


def _reference_ndtr_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The previous pairs._ndtr_diff: every branch evaluated everywhere, then selected."""
    with np.errstate(invalid="ignore"):
        pos = special.ndtr(-b) - special.ndtr(-a)
        neg = special.ndtr(a) - special.ndtr(b)
        mid = 0.5 * (special.erf(a / math.sqrt(2.0)) + special.erf(-b / math.sqrt(2.0)))
    return np.where(b >= 0, pos, np.where(a <= 0, neg, mid))


def _reference_correction_bound(z: np.ndarray, q: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """The previous pairs._correction_bound: its cell weights computed per chunk of rows."""
    lam = orders.astype(np.float64)
    scale, top = pairs._scales(z, q)
    first, last = pairs._lattice_range(scale, top, float(lam.max()))
    order = np.argsort(first, kind="stable")
    out = np.empty((z.size, lam.size))
    for i in range(0, z.size, pairs._ROWS):
        rows = order[i : i + pairs._ROWS]
        a, b = first[rows], last[rows]
        idx = np.arange(int(a.min()), int(b.max()) + 1)
        eps = np.exp(idx * math.log(pairs._RATIO))
        left, right = eps[:-1], eps[1:]
        with np.errstate(under="ignore"):
            cell = np.exp(-np.outer(left, lam)) * (-np.expm1(-np.outer(right - left, lam))) / lam[None, :]
        zr, qr = z[rows, None], q[rows, None]
        at = np.concatenate(([0.0], eps))[None, :]
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            fwd, err = pairs._forward_delta(zr, qr, at)
            rev = pairs._reverse_delta(zr, qr, at)
        up = fwd + err
        inside = (idx[None, :-1] >= a[:, None]) & (idx[None, 1:] <= b[:, None])
        upper = np.where(inside, up[:, 1:-1], 0.0) @ cell
        lower = np.where(inside, rev[:, 2:], 0.0) @ cell
        pos_a, pos_b = a - idx[0], b - idx[0]
        with np.errstate(under="ignore"):
            tail = np.exp(-np.outer(eps[pos_b], lam)) / lam[None, :]
        ar = np.arange(rows.size)
        upper += (up[:, 0] * eps[pos_a])[:, None] + up[ar, pos_b + 1][:, None] * tail
        out[rows] = lam * (lam - 1.0) * (upper - lower)
    return out


def test_ndtr_diff_per_branch_equals_every_branch_everywhere() -> None:
    rng = np.random.default_rng(11)
    b = np.concatenate([rng.normal(0, 3, 20000), rng.normal(0, 40, 2000), [0.0, -0.0, 1e-300, -1e-300]])
    a = b + np.abs(rng.normal(0, 2, b.size)) * rng.integers(0, 2, b.size)  # a >= b, some a == b
    np.testing.assert_array_equal(pairs._ndtr_diff(a, b), _reference_ndtr_diff(a, b))


# Rows in the check-in settings of the README (z = sqrt(k)/2, q = k/n) and a spread of extreme ones.
_K = np.arange(450.0, 750.0, 4.0)
_Z = np.concatenate([np.sqrt(_K) / 2.0, [0.05, 0.3, 1.0, 4.0, 15.8, 200.0, 2.0, 12.25]])
_Q = np.concatenate([_K / 600000.0, [0.5, 1e-9, 0.3, 0.01, 0.1, 0.999, 1.0, 1e-3]])


@pytest.mark.parametrize("orders", [CHECKIN_ORDERS, np.array([2, 3, 30, 300]), np.arange(2, 65)])
def test_shared_cell_table_equals_per_chunk_tables(orders: np.ndarray) -> None:
    ref = _reference_correction_bound(_Z, _Q, orders)
    pairs._CELLS.clear()
    cold = pairs._correction_bound(_Z, _Q, orders)
    np.testing.assert_array_equal(cold, ref)
    # a warm table built for other rows (a narrower range, then widened both ways) gives the same numbers
    # as the reference on the same rows (the rows computed together fix the chunks, hence BLAS's summation
    # order, in both implementations alike)
    pairs._CELLS.clear()
    pairs._correction_bound(_Z[100:102], _Q[100:102], orders)
    for sl in (slice(0, 10), slice(300, 308), slice(None)):
        want = _reference_correction_bound(_Z[sl], _Q[sl], orders)
        np.testing.assert_array_equal(pairs._correction_bound(_Z[sl], _Q[sl], orders), want)


def test_cell_table_slices_are_the_table_of_the_slice() -> None:
    lam = CHECKIN_ORDERS.astype(np.float64)
    wide = pairs._cell_table(-4000, 800, lam)
    np.testing.assert_array_equal(wide[1234:2345], pairs._cell_table(-4000 + 1234, -4000 + 2345, lam))
    pairs._CELLS.clear()
    np.testing.assert_array_equal(pairs._cells(-10, 20, lam), wide[3990:4020])
    np.testing.assert_array_equal(pairs._cells(-3000, -5, lam), wide[1000:3995])  # widened below
    np.testing.assert_array_equal(pairs._cells(100, 700, lam), wide[4100:4700])  # and above
    assert len(pairs._CELLS) == 1


# --- tails -------------------------------------------------------------------------------------------------


def _reference_bd0(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """The previous tails._bd0 (59 fixed steps of the series)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.broadcast_to(np.asarray(m, dtype=np.float64), x.shape)
    out = x * np.log(x / m) + m - x
    close = np.abs(x - m) < 0.1 * (x + m)
    if np.any(close):
        xc, mc = x[close], m[close]
        e = (xc - mc) / (xc + mc)
        e2 = e * e
        s = (xc - mc) * e
        term = 2.0 * xc * e
        acc = np.zeros_like(xc)
        for j in range(1, 60):
            term = term * e2
            acc = acc + term / (2 * j + 1)
        out[close] = s + acc
    return np.maximum(out, 0.0)


def test_deviance_series_early_exit_equals_fixed_steps() -> None:
    rng = np.random.default_rng(5)
    m = np.exp(rng.uniform(-3.0, 21.0, 200000))
    x = m * (1.0 + rng.choice([-1.0, 1.0], m.size) * np.exp(rng.uniform(-40.0, math.log(0.35), m.size)))
    x = np.concatenate([x, m[:10]])  # x == m exactly
    m = np.concatenate([m, m[:10]])
    np.testing.assert_array_equal(tails._bd0(x, m), _reference_bd0(x, m))
    for n, p in [(10**9, 0.1), (600000, 1e-3), (1000, 0.5)]:  # scalars, as the window bisections call it
        k = np.round(n * p + np.array([-7.0, -1.0, 0.0, 3.0, 50.0]) * math.sqrt(n * p))
        for kk in k:
            np.testing.assert_array_equal(tails._bd0(np.array([kk]), n * p), _reference_bd0(np.array([kk]), n * p))


# --- PLD ---------------------------------------------------------------------------------------------------


def _reference_epsilons(c: pld._Components, top: float, h: float, rounds: int, delta: float, trunc: float):
    """The previous pld._discretised: dp-accounting's pmfs, composition and (vectorised) conversion."""
    pld_pmf = pytest.importorskip("dp_accounting.pld.pld_pmf")

    def epsilon(pmf):
        dense = pmf.to_dense_pmf()
        comp = dense if rounds == 1 else dense.self_compose(rounds, tail_mass_truncation=trunc)
        probs = np.asarray(comp._probs, dtype=np.float64)
        losses = (np.arange(probs.size) + comp._lower_loss) * comp._discretization
        return pld.epsilon_for_delta(losses, probs, comp._infinity_mass, delta)

    m = int(math.ceil(top / h))
    idx = np.arange(-m, m + 1)
    deltas, surv = pld._profile_and_survival(c, idx * h)
    pess = pld_pmf.create_pmf_pessimistic_connect_dots(
        h, idx, np.maximum.accumulate(np.clip(deltas, 0.0, 1.0)[::-1])[::-1]
    )
    surv = np.minimum.accumulate(np.clip(surv, 0.0, 1.0))
    probs = np.maximum(surv - np.append(surv[1:], c.p_out), 0.0)
    opt = pld_pmf.create_pmf(dict(zip(idx.tolist(), probs.tolist(), strict=True)), h, c.p_out, False)
    eps_hi = epsilon(pess)
    return eps_hi, min(epsilon(opt), eps_hi)


PLD_CASES = [
    (600000, 1e-3, 1.0, 10, 1e-8, "analyst"),
    (600000, 1e-3, 1.0, 10, 1e-8, "server"),
    (10000, 0.1, 1.0, 10, 1e-5, "analyst"),
    (1000, 0.1, 0.3, 1, 1e-5, "analyst"),
    (100, 0.5, 2.0, 3, 1e-6, "server"),
    pytest.param((10**5, 0.01, 0.1, 200, 1e-6, "analyst"), marks=pytest.mark.slow),  # 200 rounds: CI only
]


@pytest.mark.parametrize("case", PLD_CASES)
def test_own_connect_the_dots_and_composition_equal_dp_accounting(case: tuple) -> None:
    n, gamma, sigma, rounds, delta, observer = case
    c, top, trunc = pld._setup(n, gamma, sigma, rounds, delta, observer, 1e-3, 1e-4)
    for h in (top / 2000, top / 10000):
        with np.errstate(all="ignore"):
            got = pld._discretised(c, top, h, rounds, delta, trunc)
            ref = _reference_epsilons(c, top, h, rounds, delta, trunc)
        assert got == ref


@pytest.mark.parametrize("case", PLD_CASES[:4])
def test_tails_reused_across_halvings_and_cached_components_equal_fresh_ones(case: tuple) -> None:
    n, gamma, sigma, rounds, delta, observer = case
    pld._sigma_free_components.cache_clear()
    cert = pld.checkin_pld(n, gamma, sigma, rounds, delta, observer=observer)  # memo across halvings
    pld._sigma_free_components.cache_clear()
    c, top, trunc = pld._setup(n, gamma, sigma, rounds, delta, observer, 1e-3, 1e-4)
    with np.errstate(all="ignore"):  # the final grid alone, every tail evaluated afresh
        fresh = _reference_epsilons(c, top, cert.discretization, rounds, delta, trunc)
    assert (cert.epsilon, cert.epsilon_optimistic) == fresh
    again = pld.checkin_pld(n, gamma, sigma, rounds, delta, observer=observer)  # components from the cache
    assert (again.epsilon, again.epsilon_optimistic, again.window) == (
        cert.epsilon,
        cert.epsilon_optimistic,
        cert.window,
    )


def test_logsumexp_replica_equals_scipy_bit_for_bit() -> None:
    # The Chernoff truncation bounds use a copy of scipy.special.logsumexp's arithmetic (real 1-D input, weights
    # b); the oracle is SciPy itself. Random pmfs with exact zeros, an all-zero pmf (-inf), point masses, and the
    # orders the bounds use; every value must be the same float (NaN only where SciPy gives NaN).
    rng = np.random.default_rng(20240611)
    for trial in range(120):
        size = int(rng.integers(1, 2500))
        p = rng.random(size) ** int(rng.integers(1, 30))
        p[rng.random(size) < 0.2] = 0.0
        if trial % 7 == 0:
            p[:] = 0.0
        if trial % 11 == 0:
            p = np.zeros(size)
            p[rng.integers(0, size)] = 1.0
        p /= max(float(p.sum()), 1e-300)
        ar = np.arange(size)
        for order in pld._CHERNOFF_ORDERS / size:
            want = float(special.logsumexp(ar * order, b=p))
            got = pld._logsumexp_weighted(ar * order, p, p == 0)
            assert got == want or (math.isnan(got) and math.isnan(want)), (trial, order, got, want)


def test_worker_threads_leave_every_number_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # The component tails are summed in chunk order whether the chunks run on worker threads or not, and the
    # pessimistic and optimistic compositions are independent: the certificate must be the same floats with
    # one thread and with several (the oracle is the single-threaded computation).
    args = [(10**4, 0.1, 1.0, 10, 1e-5, "analyst"), (2000, 0.05, 0.8, 50, 1e-6, "server")]
    for n, gamma, sigma, rounds, delta, observer in args:
        monkeypatch.setattr(pld, "_chunk_workers", lambda chunks, work: 1)
        one = pld.checkin_pld(n, gamma, sigma, rounds, delta, observer=observer)
        c = pld._components(n, gamma, sigma, observer, 1e-12, 1e-4)
        grid = np.linspace(0.0, 3.0, 5001)
        tails_one = pld._tails(c, grid)
        monkeypatch.setattr(pld, "_chunk_workers", lambda chunks, work: min(chunks, 3))
        many = pld.checkin_pld(n, gamma, sigma, rounds, delta, observer=observer)
        tails_many = pld._tails(c, grid)
        assert many == one
        assert np.array_equal(tails_many[0], tails_one[0]) and np.array_equal(tails_many[1], tails_one[1])


def _reference_self_convolve_bounds(p: np.ndarray, rounds: int, trunc: float) -> tuple[int, int]:
    """The previous pld._self_convolve_bounds: scipy.special.logsumexp at each Chernoff order."""
    hi = (len(p) - 1) * rounds
    lo = 0
    if trunc == 0:
        return lo, hi
    orders = pld._CHERNOFF_ORDERS / len(p)
    ar = np.arange(len(p))
    for order in orders:
        bound = (rounds * special.logsumexp(ar * order, b=p) + math.log(2 / trunc)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            hi = min(hi, math.ceil(bound))
        if order < 0:
            lo = max(lo, math.floor(bound))
    return lo, hi


@pytest.mark.parametrize("case", PLD_CASES)
def test_truncation_bounds_equal_scipy_logsumexp_ones(case: tuple) -> None:
    # the pessimistic and optimistic pmfs of each case's default grid, at several round counts
    n, gamma, sigma, rounds, delta, observer = case
    c, top, trunc = pld._setup(n, gamma, sigma, rounds, delta, observer, 1e-3, 1e-4)
    m = int(math.ceil(top / (top / 2000)))
    idx = np.arange(-m, m + 1)
    with np.errstate(all="ignore"):
        deltas, surv = pld._profile_and_survival(c, idx * (top / 2000))
    pess, _ = pld._connect_dots_pessimistic(top / 2000, idx, np.maximum.accumulate(np.clip(deltas, 0, 1)[::-1])[::-1])
    surv = np.minimum.accumulate(np.clip(surv, 0.0, 1.0))
    opt = np.maximum(surv - np.append(surv[1:], c.p_out), 0.0)
    for p in (pess, opt):
        for t in (1, 2, 10, 1000):
            for tr in (trunc, 1e-30, 0.0):
                assert pld._self_convolve_bounds(p, t, tr) == _reference_self_convolve_bounds(p, t, tr)


@pytest.mark.parametrize("args", [(1000, 0.1, 10, 1e-5, 0.5), (10000, 0.1, 100, 1e-4, 0.2)])
def test_calibration_contract(args: tuple) -> None:
    n, gamma, rounds, delta, target = args
    seen: list[tuple[str, float, float]] = []
    sigma, cert = pld.calibrate_checkin_pld(
        n, gamma, rounds, delta, target, progress=lambda stage, step, s, e: seen.append((stage, s, e))
    )
    assert cert.sigma == sigma and cert.epsilon <= target
    assert cert == pld.checkin_pld(n, gamma, sigma, rounds, delta)
    failing = [s for stage, s, e in seen if stage == "certificate" and e > target]
    assert failing and max(failing) >= sigma / (1.0 + 1e-3) and max(failing) < sigma
    assert {stage for stage, _, _ in seen} == {"estimate", "certificate"}


def _reference_edge(n: int, p: float, log_budget: float, lower: bool) -> int:
    """The previous window-edge search: a bisection, one scalar bound per step."""
    mode = min(max(math.floor((n + 1) * p), 0), n)
    if lower:
        lo, hi = 0, mode
        while lo < hi:
            mid = (lo + hi + 1) // 2
            ok = float(tails.log_binom_tail_ub(n, np.array([0.0]), np.array([mid - 1.0]), p)[0]) <= log_budget
            lo, hi = (mid, hi) if ok else (lo, mid - 1)
        return lo
    lo, hi = mode, n
    while lo < hi:
        mid = (lo + hi) // 2
        ok = float(tails.log_binom_tail_ub(n, np.array([mid + 1.0]), np.array([float(n)]), p)[0]) <= log_budget
        lo, hi = (lo, mid) if ok else (mid + 1, hi)
    return lo


@pytest.mark.parametrize("n", [1, 7, 100, 1000, pytest.param(600000, marks=pytest.mark.slow), 10**9])  # CI: 6e5
def test_window_edge_search_equals_bisection(n: int) -> None:
    for p in (1e-9, 1e-6, 1e-3, 0.1, 0.5, 0.97):
        for budget in (1e-300, 1e-40, 1e-18, 1e-9, 1e-4, 0.05, 0.4):
            for lower in (True, False):
                want = _reference_edge(n, p, math.log(budget), lower)
                assert tails.binom_window_edge(n, p, math.log(budget), lower) == want, (n, p, budget, lower)
