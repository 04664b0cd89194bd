"""The PLD accountant: privacy loss distributions of Gaussian events, composed by FFT in dp-accounting.

Supported events (each mapped to a dominating pair whose PLD dp-accounting builds with Connect-the-Dots,
Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1; composition by convolution of PLDs, Koskela,
Jälkö & Honkela 2020):

* :class:`Gaussian` (any relation): the pair N(Δ₂, σ²) vs N(0, σ²), i.e. z = σ/Δ₂ at sensitivity 1 (the
  Gaussian is rotation invariant, so the worst L2 shift is one coordinate).
* :class:`PoissonSampled` of a Gaussian (add-remove): the pairs (q N(1, z²) + (1-q) N(0, z²), N(0, z²)) and
  the reverse (the one-dimensional worst case of the sampled Gaussian, Mironov, Talwar & Zhang 2019, Sec. 3;
  both orders, as dominating pairs, Zhu, Dong & Wang 2022).
* :class:`SampledWithoutReplacement` of a Gaussian (replace-one): the same symmetrised pair with q = m/N and
  z = σ/Δ₂, Δ₂ the replace-one sensitivity (Zhu, Dong & Wang 2022, Thm 10).
* :class:`Composed` and :class:`SelfComposed` of supported events.

Every event is built twice on the same grid: the pessimistic PLD (losses rounded up; its epsilon is the
certificate) and the optimistic one (rounded down; not a certificate). Their gap is the certificate's slack.
Zero-sensitivity Gaussians and rate-0 sampling add nothing. Discrete noise (discrete Gaussian, Skellam, the
distributed discrete Gaussian) has no PLD here: use :class:`~secagg_dp.accounting.core.rdp_accountant.RdpAccountant`.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Self

from secagg_dp._validate import check_real
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant
from secagg_dp.accounting.core.events import (
    Composed,
    Gaussian,
    PoissonSampled,
    PrivacyEvent,
    SampledWithoutReplacement,
    SelfComposed,
)
from secagg_dp.errors import UnsupportedEventError

__all__ = ["PLDAccountant"]

_PLD_CITATION = (
    "PLD composition: Koskela, Jälkö & Honkela 2020; Connect-the-Dots pessimistic discretisation: Doroshenko, "
    "Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1 (dp-accounting); subsampled Gaussian pairs: Mironov, "
    "Talwar & Zhang 2019, Sec. 3 (Poisson), Zhu, Dong & Wang 2022, Thm 10 (without replacement)"
)

# A recipe is a list of (noise multiplier z = sigma / Delta_2, sampling rate q, count): the event's PLD is the
# composition of one PLD per entry, each of the pair (q N(1, z^2) + (1 - q) N(0, z^2), N(0, z^2)) taken both
# ways (dp-accounting's add/remove pair; at q = 1 the Gaussian pair N(1, z^2) vs N(0, z^2) of either relation,
# Delta_2 being the sensitivity under the event's own relation).
_Recipe = list[tuple[float, float, int]]


@functools.singledispatch
def _recipe(event: Any, neighbouring: str) -> _Recipe | str:
    """The event's Gaussian PLD components, or a string saying why there are none (dispatch on the type)."""
    return "the PLD accountant has no privacy loss distribution for this event type"


@_recipe.register
def _(event: Gaussian, neighbouring: str) -> _Recipe | str:
    if event.l2_sensitivity == 0.0:
        return []
    return [(event.noise_multiplier, 1.0, 1)]


def _sampled_gaussian(inner: PrivacyEvent, rate: float) -> _Recipe | str:
    if type(inner) is not Gaussian:
        return f"the PLD accountant subsamples only a Gaussian event, not {type(inner).__name__}"
    if inner.l2_sensitivity == 0.0 or rate == 0.0:
        return []
    return [(inner.noise_multiplier, rate, 1)]


@_recipe.register
def _(event: PoissonSampled, neighbouring: str) -> _Recipe | str:
    return _sampled_gaussian(event.event, event.rate)


@_recipe.register
def _(event: SampledWithoutReplacement, neighbouring: str) -> _Recipe | str:
    return _sampled_gaussian(event.event, event.rate)


@_recipe.register
def _(event: Composed, neighbouring: str) -> _Recipe | str:
    out: _Recipe = []
    for e in event.events:
        r = _recipe(e, neighbouring)
        if isinstance(r, str):
            return r
        out.extend(r)
    return out


@_recipe.register
def _(event: SelfComposed, neighbouring: str) -> _Recipe | str:
    r = _recipe(event.event, neighbouring)
    if isinstance(r, str):
        return r
    return [(z, q, c * event.count) for z, q, c in r]


def _first_unsupported(event: Any, neighbouring: str) -> tuple[Any, str] | None:
    """The first sub-event (depth first) the PLD accountant cannot build, and why."""
    if not isinstance(event, PrivacyEvent):
        return event, "it is not a PrivacyEvent"
    if event.neighbouring != neighbouring:
        return event, f"it is '{event.neighbouring}' but the accountant is '{neighbouring}'"
    for child in event.children():
        if isinstance(event, (Composed, SelfComposed)):
            bad = _first_unsupported(child, child.neighbouring)
            if bad is not None:
                return bad
    r = _recipe(event, neighbouring)
    if isinstance(r, str):
        inner = event.children()[0] if isinstance(event, (PoissonSampled, SampledWithoutReplacement)) else event
        return inner, r
    return None


class PLDAccountant(PrivacyAccountant):
    """Privacy-loss-distribution accountant for Gaussian events (the :class:`PrivacyAccountant` contract).

    ``value_discretization_interval`` is the loss grid step of dp-accounting's PLDs (smaller: tighter and
    slower). ``certificate(delta)`` reports the pessimistic epsilon and, as ``slack``, its gap to the
    optimistic one on the same grid.
    """

    method = "pld"
    citation = _PLD_CITATION

    def __init__(
        self,
        neighbouring: str = "add-remove",
        *,
        value_discretization_interval: float = 1e-4,
        observer: str = "analyst",
    ) -> None:
        super().__init__(neighbouring, observer=observer)
        self._h = check_real("value_discretization_interval", value_discretization_interval, lo=0.0, lo_open=True)
        self._pess: Any = None  # dp-accounting PrivacyLossDistribution (None: nothing composed yet)
        self._opt: Any = None

    @property
    def value_discretization_interval(self) -> float:
        """Step of the privacy-loss grid."""
        return self._h

    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        return _first_unsupported(event, self.neighbouring)

    def _build(self, recipe: _Recipe, pessimistic: bool) -> Any:
        # lazy (keeps `secagg-dp --help` fast); dp-accounting ships no type information
        from dp_accounting.pld import privacy_loss_distribution as pld
        from dp_accounting.privacy_accountant import NeighboringRelation as NR

        out = None
        for z, q, count in recipe:
            if count == 0:
                continue
            if q == 1.0:  # c Gaussians compose to one of noise multiplier z / sqrt(c) (Dong, Roth & Su 2022, Cor. 3.3)
                z, count = z / math.sqrt(count), 1
            one = pld.from_gaussian_mechanism(
                standard_deviation=z,
                sensitivity=1.0,
                pessimistic_estimate=pessimistic,
                value_discretization_interval=self._h,
                sampling_prob=q,
                neighboring_relation=NR.ADD_OR_REMOVE_ONE,
                use_connect_dots=pessimistic,  # dp-accounting's optimistic PLD is the Privacy Buckets one
            )
            part = one if count == 1 else one.self_compose(count)
            out = part if out is None else out.compose(part)
        return out

    def _compose(self, event: PrivacyEvent, count: int) -> None:
        r = _recipe(event, self.neighbouring)
        if isinstance(r, str):  # compose() checked support first; kept for direct callers
            raise UnsupportedEventError(f"{type(event).__name__}: {r}.")
        recipe = [(z, q, c * count) for z, q, c in r]
        add_p, add_o = self._build(recipe, True), self._build(recipe, False)
        if add_p is None:
            return
        pess = add_p if self._pess is None else self._pess.compose(add_p)
        opt = add_o if self._opt is None else self._opt.compose(add_o)
        self._pess, self._opt = pess, opt

    def get_epsilon(self, delta: float) -> float:
        d = check_real("delta", delta, lo=0.0, hi=1.0)
        if self._pess is None or d >= 1.0:
            return 0.0
        return max(0.0, float(self._pess.get_epsilon_for_delta(d)))

    def get_delta(self, epsilon: float) -> float:
        e = check_real("epsilon", epsilon, lo=0.0)
        if self._pess is None:
            return 0.0
        return min(1.0, max(0.0, float(self._pess.get_delta_for_epsilon(e))))

    def _optimistic_epsilon(self, delta: float) -> float:
        if self._opt is None or delta >= 1.0:
            return 0.0
        return max(0.0, float(self._opt.get_epsilon_for_delta(delta)))

    def certificate(self, delta: float) -> Certificate:
        eps = self.get_epsilon(delta)
        opt = min(self._optimistic_epsilon(float(delta)), eps)
        slack = eps - opt if math.isfinite(eps) else math.inf
        return self._upper_bound(
            eps,
            delta,
            slack=slack,
            detail={
                "epsilon_optimistic": opt,
                "value_discretization_interval": self._h,
                "events": len(self._events),
            },
        )

    def fresh(self) -> Self:
        return type(self)(self.neighbouring, value_discretization_interval=self._h, observer=self.observer)

    def copy(self) -> Self:
        out = self.fresh()
        out._pess, out._opt, out._events = self._pess, self._opt, list(self._events)  # PLDs are immutable
        return out
