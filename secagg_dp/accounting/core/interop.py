"""Conversion between our events and dp-accounting's ``DpEvent`` s, for users of both libraries.

dp-accounting's noise multiplier is the ratio of the noise standard deviation to the L2 sensitivity, and its
events carry no neighbouring relation (the accountant does). Ours carry both, so:

* :func:`to_dp_event` maps ``Gaussian(sigma, l2_sensitivity, rel)`` to ``GaussianDpEvent(sigma /
  l2_sensitivity)`` (``l2_sensitivity`` measured under ``rel``), ``PoissonSampled`` to ``PoissonSampledDpEvent``,
  ``SampledWithoutReplacement`` to ``SampledWithoutReplacementDpEvent``, ``Composed`` / ``SelfComposed`` to
  ``ComposedDpEvent`` / ``SelfComposedDpEvent``. Events without a dp-accounting counterpart (discrete Gaussian,
  Skellam, distributed discrete Gaussian, check-in rounds) raise :class:`UnsupportedEventError`.
* :func:`from_dp_event` maps those back, with a relation given by the caller (``GaussianDpEvent(z)`` becomes
  ``Gaussian(z, 1.0, neighbouring)``), and raises for any other ``DpEvent``.

Caution (google/differential-privacy issue #378): under ``REPLACE_ONE`` dp-accounting's PLD accountant shifts
the Gaussian by ±1 (sensitivity 2 in noise-multiplier units) while its RDP accountant's without-replacement
Gaussian uses sensitivity 1; our replace-one sensitivity is the full one (2C for a sum clipped to C). Compare
accountants under ``add-remove``, or under replace-one with dp-accounting's RDP accountant.
"""

from __future__ import annotations

import functools
from typing import Any

from secagg_dp.accounting.core.events import (
    Composed,
    Gaussian,
    PoissonSampled,
    PrivacyEvent,
    SampledWithoutReplacement,
    SelfComposed,
    check_neighbouring,
)
from secagg_dp.errors import UnsupportedEventError

__all__ = ["to_dp_event", "from_dp_event", "dp_neighboring_relation"]


def _dpa() -> Any:
    """dp-accounting, imported on first use (keeps ``secagg-dp --help`` fast)."""
    import dp_accounting  # the package ships no type information (ignore_missing_imports in pyproject.toml)

    return dp_accounting


def dp_neighboring_relation(neighbouring: str) -> Any:
    """dp-accounting's ``NeighboringRelation`` for ours: add-remove -> ADD_OR_REMOVE_ONE, replace-one -> REPLACE_ONE."""
    nr = _dpa().NeighboringRelation
    rel = check_neighbouring(neighbouring)
    return nr.ADD_OR_REMOVE_ONE if rel == "add-remove" else nr.REPLACE_ONE


@functools.singledispatch
def to_dp_event(event: Any) -> Any:
    """dp-accounting's ``DpEvent`` for ``event`` (see the module docstring); :class:`UnsupportedEventError`
    names the first sub-event without a counterpart."""
    raise UnsupportedEventError(
        f"Event {type(event).__name__} has no dp-accounting DpEvent counterpart. Offending sub-event: {event!r}."
    )


@to_dp_event.register
def _(event: Gaussian) -> Any:
    dpa = _dpa()
    return dpa.GaussianDpEvent(event.noise_multiplier)


@to_dp_event.register
def _(event: PoissonSampled) -> Any:
    dpa = _dpa()
    return dpa.PoissonSampledDpEvent(event.rate, to_dp_event(event.event))


@to_dp_event.register
def _(event: SampledWithoutReplacement) -> Any:
    dpa = _dpa()
    return dpa.SampledWithoutReplacementDpEvent(event.population, event.sample_size, to_dp_event(event.event))


@to_dp_event.register
def _(event: Composed) -> Any:
    dpa = _dpa()
    return dpa.ComposedDpEvent([to_dp_event(e) for e in event.events])


@to_dp_event.register
def _(event: SelfComposed) -> Any:
    dpa = _dpa()
    return dpa.SelfComposedDpEvent(to_dp_event(event.event), event.count)


def from_dp_event(dp_event: Any, neighbouring: str = "add-remove") -> PrivacyEvent:
    """Our event for dp-accounting's ``dp_event`` under ``neighbouring`` (the relation its sensitivity is
    measured in); Poisson sampling is add-remove and sampling without replacement replace-one whatever is
    passed. :class:`UnsupportedEventError` names the first ``DpEvent`` we have no event for."""
    dpa = _dpa()
    rel = check_neighbouring(neighbouring)
    if isinstance(dp_event, dpa.GaussianDpEvent):
        return Gaussian(float(dp_event.noise_multiplier), 1.0, rel)
    if isinstance(dp_event, dpa.PoissonSampledDpEvent):
        return PoissonSampled(float(dp_event.sampling_probability), from_dp_event(dp_event.event, "add-remove"))
    if isinstance(dp_event, dpa.SampledWithoutReplacementDpEvent):
        inner = from_dp_event(dp_event.event, "replace-one")
        return SampledWithoutReplacement(int(dp_event.sample_size), int(dp_event.source_dataset_size), inner)
    if isinstance(dp_event, dpa.ComposedDpEvent):
        return Composed(tuple(from_dp_event(e, rel) for e in dp_event.events))
    if isinstance(dp_event, dpa.SelfComposedDpEvent):
        return SelfComposed(from_dp_event(dp_event.event, rel), int(dp_event.count))
    raise UnsupportedEventError(
        f"dp-accounting event {type(dp_event).__name__} has no counterpart among our events. "
        f"Offending sub-event: {dp_event!r}."
    )
