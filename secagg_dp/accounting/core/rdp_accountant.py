"""The RDP accountant: composed Rényi-DP curve at fixed orders, converted to (epsilon, delta).

State is the neighbouring relation, the orders and the composed curve, which adds over adaptive composition
(Mironov 2017, Prop. 1). Conversion: Canonne, Kamath & Steinke 2020, Prop. 12
(:func:`~secagg_dp.accounting.core.conversion.rdp_to_dp`). An event is supported when it is a
:class:`PrivacyEvent` whose class defines its own ``rdp(orders)`` (the event's docstring cites its bound),
stated under the accountant's relation, and every sub-event is supported under its own relation.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant
from secagg_dp.accounting.core.conversion import dp_delta, rdp_to_dp
from secagg_dp.accounting.core.events import PrivacyEvent
from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS, check_orders
from secagg_dp.errors import ParameterError, UnsupportedEventError

__all__ = ["RdpAccountant", "register_event_type"]

_RDP_CITATION = (
    "RDP composition: Mironov 2017, Prop. 1; RDP -> (epsilon, delta): Canonne, Kamath & Steinke 2020, Prop. 12; "
    "per-event curves as each event's docstring cites"
)


def has_rdp_curve(cls: type) -> bool:
    """True if ``cls`` is a :class:`PrivacyEvent` subclass that defines its own ``rdp(orders)``."""
    return isinstance(cls, type) and issubclass(cls, PrivacyEvent) and cls.rdp is not PrivacyEvent.rdp


def register_event_type(cls: type) -> type:
    """Check that ``cls`` is a :class:`PrivacyEvent` subclass with its own ``rdp``; return it (a decorator).

    Kept for compatibility: it changes no global state. :class:`RdpAccountant` supports every event class
    that defines ``rdp(orders)``, ``neighbouring`` and (if it wraps events) ``children()``.
    """
    if not (isinstance(cls, type) and issubclass(cls, PrivacyEvent)):
        raise TypeError(f"Argument 'cls' must be a PrivacyEvent subclass, not {cls!r}.")
    if not has_rdp_curve(cls):
        raise TypeError(f"Argument 'cls' ({cls.__name__}) must define rdp(orders) to be composed by RDP.")
    return cls


def _first_unsupported(event: Any, neighbouring: str) -> tuple[Any, str] | None:
    if not isinstance(event, PrivacyEvent) or not has_rdp_curve(type(event)):
        return event, "its type has no RDP curve (it is not a PrivacyEvent defining rdp(orders))"
    if event.neighbouring != neighbouring:
        return event, f"it is '{event.neighbouring}' but the accountant is '{neighbouring}'"
    for child in event.children():
        bad = _first_unsupported(child, child.neighbouring)
        if bad is not None:
            return bad
    return None


class RdpAccountant(PrivacyAccountant):
    """Composes events into an RDP curve (the :class:`PrivacyAccountant` contract).

    ``supports(event)``; ``compose(event, count=1)`` returns ``self`` (chains) and raises
    :class:`UnsupportedEventError` naming the unsupported sub-event before changing anything;
    ``get_epsilon(delta)``, ``get_epsilon_and_order(delta)``, ``get_delta(epsilon)``, ``certificate(delta)``;
    ``event_rdp(event, count)`` (no state change), ``rdp``, ``orders``.
    """

    method = "rdp"
    citation = _RDP_CITATION

    def __init__(self, neighbouring: str = "add-remove", orders: Any = DEFAULT_ORDERS, *, observer: str = "analyst"):
        super().__init__(neighbouring, observer=observer)
        self._orders = check_orders(orders).copy()
        self._orders.setflags(write=False)
        self._rdp: npt.NDArray[np.float64] = np.zeros_like(self._orders)

    @property
    def orders(self) -> npt.NDArray[np.float64]:
        """The Rényi orders (read-only)."""
        return self._orders

    @property
    def rdp(self) -> npt.NDArray[np.float64]:
        """Composed RDP curve (a copy)."""
        return self._rdp.copy()

    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        return _first_unsupported(event, self.neighbouring)

    def event_rdp(self, event: PrivacyEvent, count: int = 1) -> npt.NDArray[np.float64]:
        """RDP of ``count`` repetitions of ``event`` at this accountant's orders (no state change)."""
        bad = self.unsupported(event)
        if bad is not None:
            raise UnsupportedEventError(
                f"Unsupported event {type(bad[0]).__name__}: {bad[1]}. Offending sub-event: {bad[0]!r}."
            )
        c = check_int("count", count, lo=0)
        r = np.asarray(event.rdp(self._orders), dtype=np.float64)
        if r.shape != self._orders.shape or np.any(np.isnan(r)) or np.any(r < 0):
            raise ParameterError(f"Event {type(event).__name__} returned an invalid RDP curve.")
        with np.errstate(over="ignore"):  # count·ε(α) beyond 1.8e308 is +inf
            return c * r if c else np.zeros_like(r)

    def _compose(self, event: PrivacyEvent, count: int) -> None:
        self._rdp = self._rdp + self.event_rdp(event, count)

    def get_epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """(epsilon, optimal order) at ``delta``; warns when the optimum is the largest order."""
        return rdp_to_dp(self._orders, self._rdp, delta)

    def get_epsilon(self, delta: float) -> float:
        return self.get_epsilon_and_order(delta)[0]

    def get_delta(self, epsilon: float) -> float:
        return dp_delta(self._orders, self._rdp, epsilon)[0]

    def certificate(self, delta: float) -> Certificate:
        eps, order = rdp_to_dp(self._orders, self._rdp, delta, warn=False)
        return self._upper_bound(
            eps,
            delta,
            order=order,
            detail={
                "largest_order": float(self._orders.max()),
                # the optimum at the largest order offered: larger orders may give a smaller epsilon
                "optimal_order_is_largest": bool(self._orders.size > 1 and order == float(self._orders.max())),
                "events": len(self._events),
            },
        )

    def fresh(self) -> Self:
        return type(self)(self.neighbouring, self._orders, observer=self.observer)

    def copy(self) -> Self:
        out = self.fresh()
        out._rdp = self._rdp.copy()
        out._events = list(self._events)
        return out
