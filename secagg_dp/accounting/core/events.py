"""Privacy events: frozen, validated records of what was released, each with a vectorised RDP curve.

Every event states its neighbouring relation (``"replace-one"`` or ``"add-remove"``); sensitivities are
measured under that relation. Under replace-one a sum of vectors clipped to C has L2 sensitivity 2C, under
add-remove C (:func:`sum_l2_sensitivity`; google/differential-privacy issue #378 is this trap).
Events never change meaning; a new analysis gets a new class.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core import rdp as _rdp
from secagg_dp.accounting.core import subsampling as _sub
from secagg_dp.errors import ParameterError

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "check_neighbouring",
    "sum_l2_sensitivity",
    "PrivacyEvent",
    "Gaussian",
    "DiscreteGaussian",
    "DistributedDiscreteGaussian",
    "Skellam",
    "PoissonSampled",
    "SampledWithoutReplacement",
    "Composed",
    "SelfComposed",
    "sampled",
]

NEIGHBOURING_RELATIONS: tuple[str, str] = ("replace-one", "add-remove")


def check_neighbouring(value: Any) -> str:
    """Return ``value`` if it is ``'replace-one'`` or ``'add-remove'``."""
    if value not in NEIGHBOURING_RELATIONS:
        raise ParameterError(f"Argument 'neighbouring' must be one of {NEIGHBOURING_RELATIONS}, not {value!r}.")
    relation: str = value  # one of NEIGHBOURING_RELATIONS (checked above)
    return relation


def sum_l2_sensitivity(clip: float, neighbouring: str) -> float:
    """L2 sensitivity of a sum of vectors each clipped to norm ``clip``: C (add-remove) or 2C (replace-one)."""
    c = check_real("clip", clip, lo=0.0, lo_open=True)
    return 2.0 * c if check_neighbouring(neighbouring) == "replace-one" else c


class PrivacyEvent:
    """Base of all events: ``neighbouring``, ``rdp(orders)``, ``children()`` and ``describe()``."""

    kind: ClassVar[str] = "event"
    neighbouring: str

    def rdp(self, orders: Any) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def children(self) -> tuple[PrivacyEvent, ...]:
        return ()

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (type name and fields, nested events described recursively)."""
        out: dict[str, Any] = {"type": type(self).__name__}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, PrivacyEvent):
                v = v.describe()
            elif isinstance(v, tuple):
                v = [e.describe() if isinstance(e, PrivacyEvent) else e for e in v]
            out[f.name] = v
        return out


# How each numeric field of the noise events is checked: counts >= 1, noise scales > 0, sensitivities >= 0.
_FIELD_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "n_clients": lambda name, v: check_int(name, v, lo=1),
    "dim": lambda name, v: check_int(name, v, lo=1),
    "sigma": lambda name, v: check_real(name, v, lo=0.0, lo_open=True),
    "variance": lambda name, v: check_real(name, v, lo=0.0, lo_open=True),
    "l2_sensitivity": lambda name, v: check_real(name, v, lo=0.0),
    "l1_sensitivity": lambda name, v: check_real(name, v, lo=0.0),
}


class _CheckedFields:
    """Mixin of the noise events (Gaussian, discrete Gaussian, DDG, Skellam): their fields are checked alike."""

    neighbouring: str

    def __post_init__(self) -> None:
        """Replace each numeric field, in field order, by its checked value (:data:`_FIELD_CHECKS`), then check
        the neighbouring relation."""
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check = _FIELD_CHECKS.get(f.name)
            if check is not None:
                object.__setattr__(self, f.name, check(f.name, getattr(self, f.name)))
        check_neighbouring(self.neighbouring)


@dataclass(frozen=True)
class _SigmaEvent(_CheckedFields, PrivacyEvent):
    """Fields and checks the two Gaussian events share: scale σ > 0, L2 sensitivity Δ₂ >= 0, the relation."""

    sigma: float
    l2_sensitivity: float
    neighbouring: str


@dataclass(frozen=True)
class Gaussian(_SigmaEvent):
    """Continuous Gaussian N(0, σ²I) added to a query of L2 sensitivity Δ₂: ε(α) = αΔ₂²/(2σ²) (Mironov 2017)."""

    @property
    def noise_multiplier(self) -> float:
        """σ/Δ₂ (inf when Δ₂ = 0)."""
        return math.inf if self.l2_sensitivity == 0.0 else self.sigma / self.l2_sensitivity

    def rdp(self, orders: Any) -> np.ndarray:
        return _rdp.gaussian_rdp(orders, self.sigma, self.l2_sensitivity)


@dataclass(frozen=True)
class DiscreteGaussian(_SigmaEvent):
    """N_Z(0, σ²) per coordinate of an integer query, integer shift Δ₂: ε(α) = αΔ₂²/(2σ²) (WJ20 Thm 1)."""

    def rdp(self, orders: Any) -> np.ndarray:
        return _rdp.discrete_gaussian_rdp(orders, self.sigma, self.l2_sensitivity)


@dataclass(frozen=True)
class DistributedDiscreteGaussian(_CheckedFields, PrivacyEvent):
    """Sum of n independent N_Z(0, σ²)^d shares on an integer query with L2/L1 sensitivities Δ₂, Δ₁.

    Kairouz, Liu & Steinke 2021, Prop. 14 with Thm 1 (see :func:`secagg_dp.accounting.core.rdp.ddg_rdp`).
    All quantities in the integer (scaled) domain.
    """

    n_clients: int
    sigma: float
    dim: int
    l2_sensitivity: float
    l1_sensitivity: float
    neighbouring: str

    def rdp(self, orders: Any) -> np.ndarray:
        return _rdp.ddg_rdp(orders, self.n_clients, self.sigma, self.dim, self.l2_sensitivity, self.l1_sensitivity)


@dataclass(frozen=True)
class Skellam(_CheckedFields, PrivacyEvent):
    """Skellam noise of total variance μ per coordinate on an integer query (Agarwal, Kairouz & Liu 2021).

    ε(α) = αΔ₂²/(2μ) + min{((2α−1)Δ₂² + 6Δ₁)/(4μ²), 3Δ₁/(2μ)}; n clients of variance v give μ = n·v.
    """

    variance: float
    l2_sensitivity: float
    l1_sensitivity: float
    neighbouring: str

    def rdp(self, orders: Any) -> np.ndarray:
        return _rdp.skellam_rdp(orders, self.variance, self.l2_sensitivity, self.l1_sensitivity)


def _check_event(name: str, event: Any) -> PrivacyEvent:
    if not isinstance(event, PrivacyEvent):
        raise TypeError(f"Argument '{name}' must be a PrivacyEvent, not {type(event).__name__}.")
    return event


def _subsampled_rdp(
    ev: PrivacyEvent,
    rate: float,
    orders: Any,
    gaussian_bound: Callable[[float, float, np.ndarray], np.ndarray],
    generic_bound: Callable[[np.ndarray, float, np.ndarray], np.ndarray],
) -> np.ndarray:
    """RDP of ``ev`` after subsampling at ``rate``: the Gaussian-specific bound for a Gaussian inner event
    (zero for zero sensitivity), else the generic bound on the inner event's integer-order RDP table."""
    a = _rdp.check_orders(orders)
    if isinstance(ev, Gaussian):
        if ev.l2_sensitivity == 0.0:
            return np.zeros_like(a)
        return gaussian_bound(ev.noise_multiplier, rate, a)
    table = _sub.integer_rdp_table(ev.rdp, int(math.ceil(float(a.max()))))
    return generic_bound(table, rate, a)


@dataclass(frozen=True)
class PoissonSampled(PrivacyEvent):
    """Each record joins independently with probability ``rate``, then ``event`` runs; add/remove only.

    Gaussian inner event: exact integer-order formula (Mironov, Talwar & Zhang 2019) with z = σ/Δ₂;
    any other inner event: Zhu & Wang 2019, Theorem 5. Capped by the inner RDP.
    """

    rate: float
    event: PrivacyEvent
    neighbouring: str = dataclasses.field(default="add-remove", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate", check_real("rate", self.rate, lo=0.0, hi=1.0))
        ev = _check_event("event", self.event)
        if ev.neighbouring != "add-remove":
            raise ParameterError(
                f"Poisson subsampling is analysed under 'add-remove'; inner event {type(ev).__name__} is "
                f"'{ev.neighbouring}'. To fix, give the inner event its add-remove sensitivity."
            )

    def children(self) -> tuple[PrivacyEvent, ...]:
        return (self.event,)

    def rdp(self, orders: Any) -> np.ndarray:
        return _subsampled_rdp(
            self.event, self.rate, orders, _sub.poisson_subsampled_gaussian_rdp, _sub.poisson_subsampled_rdp
        )


@dataclass(frozen=True)
class SampledWithoutReplacement(PrivacyEvent):
    """A uniformly random subset of ``sample_size`` out of ``population`` records, then ``event``; replace-one.

    Gaussian inner event: Wang, Balle & Kasiviswanathan 2019, Theorem 27 with z = σ/Δ₂ (Δ₂ under
    replace-one); any other: their Theorem 9. Capped by the inner RDP.
    """

    sample_size: int
    population: int
    event: PrivacyEvent
    neighbouring: str = dataclasses.field(default="replace-one", init=False)

    def __post_init__(self) -> None:
        n = check_int("population", self.population, lo=1)
        object.__setattr__(self, "population", n)
        object.__setattr__(self, "sample_size", check_int("sample_size", self.sample_size, lo=0, hi=n))
        ev = _check_event("event", self.event)
        if ev.neighbouring != "replace-one":
            raise ParameterError(
                f"Sampling without replacement is analysed under 'replace-one'; inner event "
                f"{type(ev).__name__} is '{ev.neighbouring}'. To fix, give it its replace-one sensitivity."
            )

    @property
    def rate(self) -> float:
        return self.sample_size / self.population

    def children(self) -> tuple[PrivacyEvent, ...]:
        return (self.event,)

    def rdp(self, orders: Any) -> np.ndarray:
        return _subsampled_rdp(self.event, self.rate, orders, _sub.wor_subsampled_gaussian_rdp, _sub.wor_subsampled_rdp)


@dataclass(frozen=True)
class Composed(PrivacyEvent):
    """Adaptive composition of heterogeneous events: RDP curves add (Mironov 2017, Prop. 1)."""

    events: tuple[PrivacyEvent, ...]
    neighbouring: str = dataclasses.field(default="", init=False)

    def __post_init__(self) -> None:
        evs = tuple(self.events)
        if not evs:
            raise ParameterError("Argument 'events' must contain at least one event, not an empty sequence.")
        for i, e in enumerate(evs):
            _check_event(f"events[{i}]", e)
        rels = {e.neighbouring for e in evs}
        if len(rels) != 1:
            raise ParameterError(f"Argument 'events' mixes neighbouring relations {sorted(rels)}; compose one.")
        object.__setattr__(self, "events", evs)
        object.__setattr__(self, "neighbouring", rels.pop())

    def children(self) -> tuple[PrivacyEvent, ...]:
        return self.events

    def rdp(self, orders: Any) -> npt.NDArray[np.float64]:
        a = _rdp.check_orders(orders)
        result: npt.NDArray[np.float64] = np.sum([e.rdp(a) for e in self.events], axis=0)
        return result


@dataclass(frozen=True)
class SelfComposed(PrivacyEvent):
    """``count`` adaptive repetitions of ``event``: ε(α) multiplied by count (Mironov 2017, Prop. 1)."""

    event: PrivacyEvent
    count: int
    neighbouring: str = dataclasses.field(default="", init=False)

    def __post_init__(self) -> None:
        ev = _check_event("event", self.event)
        object.__setattr__(self, "count", check_int("count", self.count, lo=0))
        object.__setattr__(self, "neighbouring", ev.neighbouring)

    def children(self) -> tuple[PrivacyEvent, ...]:
        return (self.event,)

    def rdp(self, orders: Any) -> np.ndarray:
        return self.count * self.event.rdp(orders)


def sampled(
    event: PrivacyEvent,
    *,
    sample_rate: float = 1.0,
    sampling: str = "poisson",
    population: int | None = None,
) -> PrivacyEvent:
    """Wrap ``event`` in the subsampling named by ``sampling`` (identity when ``sample_rate`` = 1).

    ``sampling='without-replacement'`` needs ``population`` N with ``sample_rate``·N an integer.
    """
    q = check_real("sample_rate", sample_rate, lo=0.0, hi=1.0)
    if sampling not in ("poisson", "without-replacement"):
        raise ParameterError(f"Argument 'sampling' must be 'poisson' or 'without-replacement', not {sampling!r}.")
    if q == 1.0:
        return event
    if sampling == "poisson":
        return PoissonSampled(q, event)
    if population is None:
        raise ParameterError("Argument 'population' is required for sampling without replacement, not None.")
    n = check_int("population", population, lo=1)
    m = q * n
    if abs(m - round(m)) > 1e-9 * max(1.0, m):
        raise ParameterError(
            f"Argument 'sample_rate' times population must be an integer sample size, not {q!r}*{n} = {m!r}."
        )
    return SampledWithoutReplacement(int(round(m)), n, event)
