"""Add-then-remove accounting: exact small-case Renyi divergences of the mechanism with removal, computed by
convolving every kept component's pmf (scipy's Bessel function, independent of the code under test), against
the certificate; and the d-mixture of :class:`EnforcedSkellamSum` against its exact value."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from secagg_dp.accounting.checkin.enforced import EnforcedSkellamSum, enforced_checkin_provider, enforced_variance
from secagg_dp.accounting.core.rdp import skellam_rdp
from secagg_dp.errors import ParameterError
from secagg_dp.noise.add_then_remove import NoiseSchedule

HALF = 120  # support [-HALF, HALF] of the exact distributions (the mass outside is below 1e-60 here)
ORDERS = np.arange(2, 13)


def _pmf(variance: float) -> np.ndarray:
    k = np.arange(-HALF, HALF + 1)
    return special.ive(np.abs(k), variance)


def _convolve_all(variances: list[float]) -> np.ndarray:
    out = np.zeros(2 * HALF + 1)
    out[HALF] = 1.0
    for v in variances:
        out = np.convolve(out, _pmf(v))[HALF : 3 * HALF + 1]
    return out


def _renyi_shift(p: np.ndarray, shift: int, orders: np.ndarray) -> np.ndarray:
    """D_a(P(. - shift) || P) exactly on the support (both positive there), in nats."""
    a = p[shift:] if shift > 0 else p
    b = p[: p.size - shift] if shift > 0 else p
    ok = (a > 0) & (b > 0)
    la, lb = np.log(a[ok]), np.log(b[ok])
    return np.array([special.logsumexp(o * la + (1 - o) * lb) / (o - 1) for o in orders])


def _removed_mechanism_noise(schedule: NoiseSchedule, d: int) -> list[float]:
    """The variance of every component left in the sum of the N - d survivors after removal at d."""
    gone = set(schedule.removable(d))
    per_client = [schedule.base_variance] + [
        v for g, v in enumerate(schedule.group_variances, start=1) if g not in gone
    ]
    return per_client * (schedule.roster - d)


@pytest.mark.parametrize("grouping", ["every", "log2"])
@pytest.mark.parametrize("shift", [1, 2])  # adversarial inputs: the largest replace-one shift of a clip-1 value (2)
def test_exact_mechanism_with_removal_is_within_the_certificate(grouping: str, shift: int) -> None:
    schedule = NoiseSchedule(3.0, 7, 0.5, grouping)  # D = 3
    for d in range(0, 6):
        noise = _convolve_all(_removed_mechanism_noise(schedule, d))
        x = np.arange(-HALF, HALF + 1)
        assert noise.sum() == pytest.approx(1.0, abs=1e-12)
        assert float((x * x * noise).sum()) == pytest.approx(schedule.total_variance(d), rel=1e-9)  # the claim
        exact = _renyi_shift(noise, shift, ORDERS)
        cert = skellam_rdp(ORDERS, schedule.certified_variance(d), float(shift), float(shift))
        assert np.all(exact <= cert + 1e-12), (d, exact, cert)
        if d <= schedule.max_dropouts and grouping == "every":  # the target exactly: the certificate is mu's
            assert schedule.certified_variance(d) == 3.0


def test_mixture_over_dropouts_is_exact_up_to_the_skellam_bound() -> None:
    """For k inputs, eps_k = 1/(a-1) log sum_d P(d) e^{(a-1) D_a(k, d)} with d ~ Bin(n - k, rho) revealed: the
    exact D_a(k, d) of the convolved noise (actual variance, grouping excess included) never exceeds the
    mechanism's value, and the block bound at k_lo covers every k of the block."""
    n, tol, mu, shift = 9, 0.3, 2.0, 2
    mech = EnforcedSkellamSum(mu, float(shift), float(shift), n, tol, roster_rate=0.8, sum_rate=0.5)
    rho = mech.dropout_rate
    assert rho == pytest.approx((0.8 - 0.5) / 0.5)
    got = mech.rdp_upper(np.arange(1, n + 1), np.arange(1, n + 1), ORDERS)
    for k in range(1, n + 1):
        ds = np.arange(0, n - k + 1)
        div = []
        for d in ds:
            schedule = NoiseSchedule(mu, k + int(d), tol, "log2")
            div.append(_renyi_shift(_convolve_all(_removed_mechanism_noise(schedule, int(d))), shift, ORDERS))
        w = stats.binom.pmf(ds, n - k, rho)
        exact = np.log((w[:, None] * np.exp((ORDERS - 1) * np.array(div))).sum(axis=0)) / (ORDERS - 1)
        assert np.all(exact <= got[k - 1] + 1e-12), (k, exact, got[k - 1])
    assert np.all(np.diff(got, axis=0) <= 1e-12)  # non-increasing in k: the block bound at k_lo is valid


def test_no_dropouts_is_the_plain_skellam_sum_of_the_target() -> None:
    mech = EnforcedSkellamSum(50.0, 4.0, 8.0, 100, 0.1, roster_rate=0.3, sum_rate=0.3)
    for k in (1, 10, 60):
        np.testing.assert_allclose(mech.rdp_upper([k], [k], ORDERS)[0], skellam_rdp(ORDERS, 50.0, 4.0, 8.0), rtol=1e-12)


def test_degraded_variance_formula() -> None:
    # k = 7: d = 1 (N = 8, D = 1) keeps mu; d = 3 (N = 10, D = 2) leaves k mu / (N - D) = 7 mu / 8
    assert enforced_variance(8.0, 0.2, 7, [0, 1, 3]).tolist() == [8.0, 8.0, 7.0]


def test_provider_and_bad_inputs() -> None:
    prov = enforced_checkin_provider(
        50, target_variance=10.0, l2_sensitivity=1.0, tolerance=0.1, roster_rate=0.5, sum_rate=0.4
    )
    assert prov.mechanism.l2_sensitivity == 2.0  # replace-one doubles one client's bound
    with pytest.raises(ParameterError, match="sum_rate"):
        EnforcedSkellamSum(1.0, 1.0, 1.0, 10, 0.1, roster_rate=0.2, sum_rate=0.3)
    with pytest.raises(ParameterError, match="tolerance"):
        EnforcedSkellamSum(1.0, 1.0, 1.0, 10, 1.0, roster_rate=0.2, sum_rate=0.1)


def test_the_certificate_goes_through_the_accountant_contract_and_the_ledger_format() -> None:
    """The enforced round is an ordinary CheckinRound: the check-in accountant (core contract) certifies it with
    the rdp and window methods, and the ledger's JSON form rebuilds an equal event (same RDP curve)."""
    from secagg_dp.accounting.checkin.accountant import CheckinAccountant
    from secagg_dp.accounting.checkin.events import CheckinRound
    from secagg_dp.accounting.checkin.mixture import checkin_orders
    from secagg_dp.accounting.core.event_json import event_from_json, event_to_json

    prov = enforced_checkin_provider(
        200, target_variance=400.0, l2_sensitivity=3.0, dim=16, tolerance=0.1, roster_rate=0.27, sum_rate=0.22
    )
    event = CheckinRound(provider=prov, clients=200, gamma=0.22, sample_size=None, neighbouring="replace-one")
    orders = checkin_orders(64)
    back = event_from_json(event_to_json(event))
    assert back == event
    np.testing.assert_array_equal(back.rdp(orders), event.rdp(orders))
    for method in ("rdp", "window"):
        acc = CheckinAccountant(method, "replace-one", orders=orders)
        assert acc.supports(event)
        cert = acc.compose(event, 10).certificate(1e-5)
        assert cert.neighbouring == "replace-one" and 0.0 < cert.epsilon < float("inf")
