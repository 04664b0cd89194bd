"""One builder of the check-in accountant's per-k provider, shared by the simulator and ``secagg-dp account checkin``.

:func:`checkin_provider` owns the sensitivity arithmetic. Inputs are one unit's bounds under add-remove, in the
noise's units (grid points for ``ddg``/``skellam``; any unit for ``gaussian``, where only sigma / Delta_2 matters):

* client level (``local_steps=None``; replace-one, the check-in accountant's relation for a client): the sum's
  sensitivities are twice one client's (the difference of two vectors, triangle inequality); the mixture
  amplifies at rate k/n with the tightest bound for the mechanism (``amplification="auto"``).
* sample level (``local_steps=S``; add-remove of one sample): one sample's bounds as given; S local steps with
  Poisson rate q inside each client; check-in by joint convexity at rate k/n.

The L1 bound defaults to Delta_2 * min(sqrt(d), Delta_2): an integer vector of L2 norm <= Delta_2 has L1 norm
<= sqrt(d) Delta_2 (Cauchy-Schwarz) and <= Delta_2^2 (|v| <= v^2 for an integer v).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.checkin.bases import GaussianSum
from secagg_dp.accounting.checkin.local_steps import LocalStepsGaussian
from secagg_dp.accounting.checkin.mixture import BaseMechanism, SubsampledCheckin
from secagg_dp.errors import ParameterError
from secagg_dp.plan import Mechanism

if TYPE_CHECKING:
    from secagg_dp.noise.add_then_remove import NoiseSpec

__all__ = ["CHECKIN_MECHANISMS", "checkin_provider", "plan_checkin_provider", "plan_enforced_provider"]

CHECKIN_MECHANISMS = ("gaussian", "ddg", "skellam")


class DPPlanLike(Protocol):
    """What the plan builders read of a round's plan (:class:`secagg_dp.plan.DPPlan` has it all)."""

    @property
    def mechanism(self) -> Any: ...
    @property
    def sigma_int(self) -> float: ...
    @property
    def l2_sensitivity(self) -> float: ...
    @property
    def l1_sensitivity(self) -> float: ...
    @property
    def padded_dim(self) -> int: ...


class _ClientBounds(TypedDict):
    """The codec's bounds on one encoded vector (a client's update, or one sample's gradient with local steps) and
    the padded dimension, as both plan builders pass them on."""

    l2_sensitivity: float
    l1_sensitivity: float
    dim: int


def _client_bounds(plan: DPPlanLike) -> _ClientBounds:
    """``plan``'s L2 and L1 sensitivities on the grid and its padded dimension."""
    return _ClientBounds(l2_sensitivity=plan.l2_sensitivity, l1_sensitivity=plan.l1_sensitivity, dim=plan.padded_dim)


def checkin_provider(
    mechanism: str,
    n: int,
    *,
    sigma: float,
    l2_sensitivity: float,
    l1_sensitivity: float | None = None,
    dim: int = 1,
    local_steps: int | None = None,
    sample_rate: float = 1.0,
    amplification: str = "auto",
) -> SubsampledCheckin:
    """The per-k provider of distributed check-in over ``n`` clients, each adding noise of std ``sigma``.

    ``l2_sensitivity`` / ``l1_sensitivity`` bound one client's (client level) or one sample's (``local_steps``)
    encoded contribution under add-remove, in the units of ``sigma``; ``dim`` is the vector dimension (the
    padded one for the codec). ``amplification`` applies at client level only (sample level is joint convexity).
    """
    if mechanism not in CHECKIN_MECHANISMS:
        raise ParameterError(f"Argument 'mechanism' must be one of {CHECKIN_MECHANISMS}, not {mechanism!r}.")
    n = check_int("n", n, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    l2 = check_real("l2_sensitivity", l2_sensitivity, lo=0.0, lo_open=True)
    dim = check_int("dim", dim, lo=1)
    l1 = l2 * min(math.sqrt(dim), l2) if l1_sensitivity is None else check_real("l1_sensitivity", l1_sensitivity)
    mech: BaseMechanism
    if local_steps is not None:
        steps = check_int("local_steps", local_steps, lo=1)
        if mechanism == "gaussian":
            mech = LocalStepsGaussian(sigma / l2, steps, sample_rate)
        else:  # the grid mechanism's own builder (secagg_dp.plan.Mechanism)
            mech = Mechanism(mechanism).local_steps_base(sigma, dim, l2, l1, steps, sample_rate)
        return SubsampledCheckin(mech, n, amplification="joint-convexity", neighbouring="add-remove")
    if sample_rate != 1.0:
        raise ParameterError("Argument 'sample_rate' needs 'local_steps' (sampling inside each client).")
    d2, d1 = 2.0 * l2, 2.0 * l1  # replace-one: twice one client's bounds
    if mechanism == "gaussian":
        mech = GaussianSum(sigma / l2)  # GaussianSum takes C = 1 and doubles it itself
    else:
        mech = Mechanism(mechanism).sum_base(sigma, dim, d2, d1)
    return SubsampledCheckin(mech, n, amplification=amplification)


def plan_checkin_provider(
    plan: DPPlanLike,
    n: int,
    *,
    mechanism: str | None = None,
    local_steps: int | None = None,
    sample_rate: float = 1.0,
) -> SubsampledCheckin:
    """:func:`checkin_provider` for a round's plan (:class:`secagg_dp.plan.DPPlan`): noise std ``plan.sigma_int``
    on the grid, the codec's sensitivities of one client's vector (client level, ``local_steps=None``) or of one
    sample's encoded gradient (``local_steps`` S, rate ``sample_rate`` inside each client), dimension
    ``plan.padded_dim``. ``mechanism`` defaults to the plan's."""
    name = str(plan.mechanism) if mechanism is None else mechanism
    return checkin_provider(
        name, n, sigma=plan.sigma_int, **_client_bounds(plan), local_steps=local_steps, sample_rate=sample_rate
    )


def plan_enforced_provider(
    plan: DPPlanLike, noise: NoiseSpec, n: int, *, roster_rate: float, sum_rate: float
) -> SubsampledCheckin:
    """The per-k provider with add-then-remove noise ``noise`` (target variance mu in the sum, tolerance) for a
    round's plan: :func:`~secagg_dp.accounting.checkin.enforced.enforced_checkin_provider` with the codec's
    sensitivities of one client's vector, roster rate r (a client is in the roster) and sum rate gamma."""
    from secagg_dp.accounting.checkin.enforced import enforced_checkin_provider

    return enforced_checkin_provider(
        n,
        target_variance=noise.target_variance,
        **_client_bounds(plan),
        tolerance=noise.tolerance,
        roster_rate=roster_rate,
        sum_rate=sum_rate,
    )
