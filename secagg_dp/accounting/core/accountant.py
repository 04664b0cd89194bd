"""One accountant contract and one certificate record, shared by every accountant (RDP, PLD, check-in).

The contract follows dp-accounting's ``PrivacyAccountant``: ``supports(event)``; ``compose(event, count=1)``
returns the accountant (calls chain) and raises :class:`~secagg_dp.errors.UnsupportedEventError` naming the
offending sub-event **before** any state changes; ``get_epsilon(delta)`` and ``get_delta(epsilon)``;
``fresh()`` (an empty accountant with the same configuration) and ``copy()``; ``certificate(delta)``, the
:class:`Certificate` record. Every accountant is for one neighbouring relation and one observer (who sees
the released outputs: ``"analyst"`` sees them, the secure-aggregation ``"server"`` also sees who took part, the
``"coalition"`` of an active server with corrupt clients also knows their inputs and noise).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Self

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.events import PrivacyEvent, check_neighbouring
from secagg_dp.errors import ParameterError, UnsupportedEventError

__all__ = [
    "OBSERVERS",
    "BOUNDS",
    "Certificate",
    "PrivacyAccountant",
    "UnsupportedEventError",
    "check_observer",
]

#: Who sees the released outputs: the analyst (the outputs only), the secure-aggregation server (also who
#: took part and who dropped) or the coalition of an active server with corrupt clients (also their inputs and
#: noise; it may exclude honest clients down to the smallest sum the protocol lets finish);
#: docs/accounting/observers.md.
OBSERVERS: tuple[str, str, str] = ("analyst", "server", "coalition")

#: What a :class:`Certificate`'s epsilon is: a proven ``"upper"`` bound (the only kind that certifies), a
#: proven ``"lower"`` bound on the true epsilon, or an ``"estimate"`` that is neither.
BOUNDS: tuple[str, str, str] = ("upper", "lower", "estimate")

#: The layouts of :meth:`Certificate.as_dict`.
SCHEMAS: tuple[str, str, str, str] = ("certificate", "checkin", "pld", "results")


def check_observer(value: Any) -> str:
    """Return ``value`` if it is one of :data:`OBSERVERS` (``'analyst'``, ``'server'``, ``'coalition'``)."""
    if value not in OBSERVERS:
        raise ParameterError(f"Argument 'observer' must be one of {OBSERVERS}, not {value!r}.")
    return str(value)


def _nonneg_or_inf(name: str, value: Any) -> float:
    """A float >= 0, +inf allowed (an infinite epsilon is a valid, useless bound), NaN refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParameterError(f"Argument '{name}' must be a real number, not {value!r}.")
    v = float(value)
    if math.isnan(v) or v < 0.0:
        raise ParameterError(f"Argument '{name}' must be >= 0 (inf allowed), not {value!r}.")
    return v


@dataclass(frozen=True)
class Certificate:
    """An (epsilon, delta) statement about a composed mechanism, for one observer and neighbouring relation.

    ``certificate`` is True only for a proven upper bound (``bound == "upper"``), with its proof in
    ``citation`` (author, year, theorem). ``slack`` is the numerical slack of the computation: epsilon minus
    a lower estimate of the same computation (PLD: pessimistic minus optimistic discretisation; 0 when the
    computation has no discretisation). ``order`` is the Rényi order of an RDP conversion (None otherwise);
    ``detail`` holds method-specific fields (read-only).
    """

    epsilon: float
    delta: float
    observer: str
    neighbouring: str
    method: str
    certificate: bool
    citation: str
    slack: float = 0.0
    bound: str = "upper"
    order: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _nonneg_or_inf("epsilon", self.epsilon))
        object.__setattr__(self, "delta", check_real("delta", self.delta, lo=0.0, hi=1.0))
        check_observer(self.observer)
        check_neighbouring(self.neighbouring)
        if not isinstance(self.method, str) or not self.method:
            raise ParameterError(f"Argument 'method' must be a non-empty string, not {self.method!r}.")
        if not isinstance(self.certificate, bool):
            raise ParameterError(f"Argument 'certificate' must be True or False, not {self.certificate!r}.")
        if self.bound not in BOUNDS:
            raise ParameterError(f"Argument 'bound' must be one of {BOUNDS}, not {self.bound!r}.")
        if self.certificate and self.bound != "upper":
            raise ParameterError(
                f"Argument 'certificate' is True but 'bound' is {self.bound!r}: only a proven upper bound certifies."
            )
        if not isinstance(self.citation, str) or not self.citation.strip():
            raise ParameterError("Argument 'citation' must name the result (author, year, theorem), not empty.")
        object.__setattr__(self, "slack", _nonneg_or_inf("slack", self.slack))
        if self.order is not None:
            object.__setattr__(self, "order", _nonneg_or_inf("order", self.order))
        object.__setattr__(self, "detail", MappingProxyType(dict(self.detail)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle and deep-copy by field values (``detail`` is a read-only mapping proxy, which does not
        pickle); a subclass keeps its class and its fields as they are."""
        state = {f.name: getattr(self, f.name) for f in fields(Certificate)}
        state["detail"] = dict(self.detail)
        return (_restore_certificate, (type(self), state))

    def as_dict(self, *, schema: str = "certificate") -> dict[str, Any]:
        """JSON-ready record: the one serialiser of every certificate.

        ``schema="certificate"`` (default): the fields, ``detail`` under its own key. ``"checkin"`` and
        ``"pld"``: the flat layouts the check-in mixture (``CheckinCertificate``) and check-in PLD
        (``PLDCertificate``) records have always had in ``secagg-dp account checkin --json`` (fields and the
        method's ``detail`` keys side by side, the order as an integer), kept so that no output changes.
        ``"results"``: the simulator's results.json form, the fields without ``detail``, the order as an integer
        (None if absent or infinite), ``rounds`` and ``ex_post``, then the other ``detail`` keys.
        """
        if schema == "results":
            out = {k: v for k, v in self.as_dict().items() if k != "detail"}
            order = self.order
            out.update(
                order=int(order) if order is not None and math.isfinite(order) else None,
                rounds=self.detail.get("rounds"),
                ex_post=bool(self.detail.get("ex_post", False)),
            )
            out.update({k: v for k, v in self.detail.items() if k not in out})
            return out
        if schema == "checkin":
            return self._checkin_dict()
        if schema == "pld":
            return self._pld_dict()
        if schema != "certificate":
            raise ParameterError(f"Argument 'schema' must be one of {SCHEMAS}, not {schema!r}.")
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "observer": self.observer,
            "neighbouring": self.neighbouring,
            "method": self.method,
            "certificate": self.certificate,
            "bound": self.bound,
            "citation": self.citation,
            "slack": self.slack,
            "order": self.order,
            "detail": dict(self.detail),
        }

    def _coalition(self) -> dict[str, Any]:
        d = self.detail
        return {"colluders": d["colluders"], "min_sum": d["min_sum"]} if self.observer == "coalition" else {}

    def _checkin_dict(self) -> dict[str, Any]:
        d = self.detail
        window = d.get("window")
        order = self.order
        return {
            "observer": self.observer,
            "certificate": self.certificate,
            "ex_post": bool(d.get("ex_post", False)),
            "epsilon": self.epsilon,
            "delta": self.delta,
            "order": int(order) if order is not None and math.isfinite(order) else order,
            "method": self.method,
            "neighbouring": self.neighbouring,
            "rounds": d.get("rounds"),
            "window": list(window) if window else None,
            "delta_rdp": d.get("delta_rdp"),
            "delta_window": d.get("delta_window"),
            **self._coalition(),
        }

    def _pld_dict(self) -> dict[str, Any]:
        d = self.detail
        return {
            "observer": self.observer,
            "certificate": self.certificate,
            "ex_post": False,  # ex ante, like every certificate; the key keeps one schema with the RDP path
            "method": self.method,
            "epsilon": self.epsilon,
            "order": None,  # no Rényi order: the PLD is converted to (epsilon, delta) directly
            "epsilon_optimistic": d["epsilon_optimistic"],
            "delta": self.delta,
            "neighbouring": self.neighbouring,
            "rounds": d["rounds"],
            "sigma": d["sigma"],
            "window": list(d["window"]),
            "blocks": d["blocks"],
            "delta_tail": d["delta_tail"],
            "delta_truncation": d["delta_truncation"],
            "discretization": d["discretization"],
            "tail_handling": d["tail_handling"],
            **self._coalition(),
        }


#: Marks an argument a :class:`Certificate` subclass's constructor was not given (then read from ``detail``).
_UNSET: Any = object()


def _field_or_detail(name: str, value: Any, detail: Mapping[str, Any] | None, default: Any = _UNSET) -> Any:
    """A subclass constructor's argument ``name``: ``value`` if given, else ``detail[name]``, else ``default``
    (required when there is no default). Lets :func:`dataclasses.replace` rebuild a subclass from its fields."""
    if value is not _UNSET:
        return value
    if detail is not None and name in detail:
        return detail[name]
    if default is _UNSET:
        raise ParameterError(f"Argument {name!r} is required.")
    return default


def _restore_certificate(cls: type[Certificate], state: dict[str, Any]) -> Certificate:
    """The :class:`Certificate` (or subclass) of :meth:`Certificate.__reduce__`'s ``state``."""
    out = object.__new__(cls)
    for name, value in state.items():
        object.__setattr__(out, name, MappingProxyType(value) if name == "detail" else value)
    return out


class PrivacyAccountant(abc.ABC):
    """Abstract accountant: composes :class:`PrivacyEvent` s and certifies (epsilon, delta).

    Subclasses set ``method`` and ``citation`` and implement :meth:`unsupported` (the first sub-event they
    cannot handle, and why), :meth:`_compose` (which must change no state if it raises), ``get_epsilon``,
    ``get_delta``, ``certificate`` and ``fresh``. ``events`` is the composed history, oldest first.
    """

    method: str
    citation: str

    def __init__(self, neighbouring: str, *, observer: str = "analyst") -> None:
        self._neighbouring = check_neighbouring(neighbouring)
        self._observer = check_observer(observer)
        self._events: list[tuple[PrivacyEvent, int]] = []

    @property
    def neighbouring(self) -> str:
        """The neighbouring relation every composed event must be stated under."""
        return self._neighbouring

    @property
    def observer(self) -> str:
        """Who the certificate protects against (``"analyst"`` or ``"server"``)."""
        return self._observer

    @property
    def events(self) -> tuple[tuple[PrivacyEvent, int], ...]:
        """(event, count) for every composition so far, oldest first."""
        return tuple(self._events)

    @abc.abstractmethod
    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        """None if ``event`` (with every sub-event) can be composed, else (offending sub-event, reason)."""

    def supports(self, event: Any) -> bool:
        """True if :meth:`compose` accepts ``event`` now (state is never changed)."""
        return self.unsupported(event) is None

    def compose(self, event: PrivacyEvent, count: int = 1) -> Self:
        """Compose ``count`` adaptive repetitions of ``event``; returns ``self``. Refuses before changing state."""
        c = check_int("count", count, lo=0)
        bad = self.unsupported(event)
        if bad is not None:
            sub, why = bad
            raise UnsupportedEventError(
                f"{type(self).__name__} cannot compose {type(event).__name__}: sub-event {type(sub).__name__} "
                f"is unsupported ({why}). Offending sub-event: {sub!r}. State unchanged."
            )
        self._compose(event, c)
        self._events.append((event, c))
        return self

    @abc.abstractmethod
    def _compose(self, event: PrivacyEvent, count: int) -> None:
        """Add ``count`` repetitions of a supported ``event`` to the state; compute first, then assign."""

    @abc.abstractmethod
    def get_epsilon(self, delta: float) -> float:
        """Smallest certified epsilon at ``delta`` for everything composed (an upper bound)."""

    @abc.abstractmethod
    def get_delta(self, epsilon: float) -> float:
        """Smallest certified delta at ``epsilon`` for everything composed (an upper bound)."""

    @abc.abstractmethod
    def certificate(self, delta: float) -> Certificate:
        """The :class:`Certificate` record at ``delta`` for everything composed."""

    def _upper_bound(
        self,
        epsilon: float,
        delta: float,
        *,
        slack: float = 0.0,
        order: float | None = None,
        detail: Mapping[str, Any],
        citation: str | None = None,
    ) -> Certificate:
        """The proven upper bound (``certificate=True``) at (``epsilon``, ``delta``) under this accountant's
        observer, relation, method and citation (``citation`` when given, for an event-specific source), with the
        method-specific ``slack``, ``order`` and ``detail``."""
        return Certificate(
            epsilon=epsilon,
            delta=float(delta),
            observer=self.observer,
            neighbouring=self.neighbouring,
            method=self.method,
            certificate=True,
            citation=self.citation if citation is None else citation,
            slack=slack,
            order=order,
            detail=detail,
        )

    @abc.abstractmethod
    def fresh(self) -> Self:
        """An empty accountant with this one's configuration (relation, observer, orders, method...)."""

    def copy(self) -> Self:
        """An accountant with this one's configuration and history (re-composed; no state shared)."""
        out = self.fresh()
        for ev, c in self._events:
            out.compose(ev, c)
        return out


def delta_by_bisection(
    epsilon_of: Callable[[float], float], epsilon: float, *, smallest: float = 1e-30, log_tol: float = 1e-4
) -> float:
    """Smallest delta in [``smallest``, 1] (to within ``log_tol`` in log delta, rounded up) whose epsilon
    ``epsilon_of(delta)`` is <= ``epsilon``.

    For accountants whose engine gives epsilon for a delta only (window, check-in PLD). ``epsilon_of`` must be
    non-increasing in delta; a :class:`ParameterError` from it counts as "not certifiable at this delta".
    The result is a delta at which ``epsilon_of`` was evaluated and met ``epsilon`` (or 1, which every
    mechanism meets), so it is an upper bound whenever ``epsilon_of`` is one.
    """
    e = check_real("epsilon", epsilon, lo=0.0)
    lo_d = check_real("smallest", smallest, lo=0.0, hi=1.0, lo_open=True, hi_open=True)

    def ok(log_d: float) -> bool:
        try:
            return epsilon_of(math.exp(log_d)) <= e
        except ParameterError:
            return False

    lo, hi = math.log(lo_d), 0.0
    if ok(lo):
        return lo_d
    while hi - lo > log_tol:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return 1.0 if hi == 0.0 else math.exp(hi)
