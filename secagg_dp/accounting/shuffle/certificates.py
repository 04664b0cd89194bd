"""The shuffle bounds reported through the accountant contract's :class:`Certificate` record.

Each bound is an RDP curve of one round, composed over T rounds (Mironov 2017, Prop. 1) and converted to
(epsilon, delta) by Canonne, Kamath & Steinke 2020, Prop. 12. Only an UPPER bound on the RDP gives a
certificate; a curve that is a lower bound on the mechanism's RDP (one neighbouring pair) or an unproven
estimate gives ``certificate=False`` with ``bound="estimate"``: the upper-bound conversion of a lower RDP
curve is neither an upper nor a lower bound on the mechanism's epsilon. Neighbouring relation: replace-one
(one user's value, L2 sensitivity 1, replaced). Observer: the analyst, who sees the shuffled reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant
from secagg_dp.accounting.core.conversion import dp_delta, rdp_to_dp
from secagg_dp.accounting.core.events import PrivacyEvent, SelfComposed
from secagg_dp.errors import ParameterError

__all__ = ["SHUFFLE_BOUNDS", "ShuffleAccountant", "ShuffleRound", "shuffle_certificate"]

_Curve = Callable[[list[int], int, float, float | None], npt.NDArray[np.float64]]


def _gaussian_pair(o: list[int], n: int, sigma: float, gamma: float | None) -> npt.NDArray[np.float64]:
    from secagg_dp.accounting.shuffle.gaussian import shuffle_gaussian_rdp

    return np.asarray(shuffle_gaussian_rdp(o, n=n, sigma=sigma), dtype=np.float64)


def _gaussian_upper(o: list[int], n: int, sigma: float, gamma: float | None) -> npt.NDArray[np.float64]:
    from secagg_dp.accounting.shuffle.gaussian import shuffle_gaussian_rdp_upper

    return np.asarray(shuffle_gaussian_rdp_upper(o, sigma=sigma), dtype=np.float64)


def _checkin(name: str) -> _Curve:
    def curve(o: list[int], n: int, sigma: float, gamma: float | None) -> npt.NDArray[np.float64]:
        from secagg_dp.accounting.shuffle import shuffled_checkin as sc

        if gamma is None:
            raise ParameterError(f"Argument 'gamma' is required for the shuffled check-in bound {name!r}, not None.")
        if name == "checkin-upper":
            r = sc.shuffled_checkin_gaussian_rdp_windowed(o, n=n, gamma=gamma, sigma=sigma, base="gaussian-upper")
        elif name == "checkin-shuffle-estimate":
            r = sc.shuffled_checkin_gaussian_rdp_windowed(o, n=n, gamma=gamma, sigma=sigma, base="shuffle-lower")
        elif name == "checkin-pair":
            r = sc.shuffled_checkin_gaussian_rdp_pair_lower(o, n=n, gamma=gamma, sigma=sigma)
        else:
            r = sc.shuffled_checkin_gaussian_rdp_chernoff(o, n=n, gamma=gamma, sigma=sigma)
        return np.asarray(r, dtype=np.float64)

    return curve


#: name -> (RDP curve, certificate?, what the RDP curve is, citation). Only the two "upper" curves certify.
SHUFFLE_BOUNDS: Mapping[str, tuple[_Curve, bool, str, str]] = MappingProxyType(
    {
        "gaussian-pair": (
            _gaussian_pair,
            False,
            "lower bound on the shuffle Gaussian RDP (one neighbouring pair)",
            "Liew & Takahashi 2022 (LT22), Thm 1 = Liew, Hasegawa & Takahashi 2022 (LHT22), Thm 3 (one pair only)",
        ),
        "gaussian-upper": (
            _gaussian_upper,
            True,
            "upper bound: the Gaussian without shuffling",
            "LT22 Corollary 1 (Mironov 2017, Prop. 7); Canonne, Kamath & Steinke 2020, Prop. 12",
        ),
        "checkin-upper": (
            _checkin("checkin-upper"),
            True,
            "upper bound: check-in mixture with the Gaussian RDP as base (no shuffling gain)",
            "LHT22 Thm 2 at rate k/n with base LT22 Corollary 1; Wang, Balle & Kasiviswanathan 2019, Thm 9; "
            "Canonne, Kamath & Steinke 2020, Prop. 12",
        ),
        "checkin-shuffle-estimate": (
            _checkin("checkin-shuffle-estimate"),
            False,
            "estimate: check-in mixture fed by the shuffle Gaussian lower bound (LHT22 Sec. 5)",
            "LHT22 Thm 2 with LT22 Eq. 16-17 (optimistic, not proven)",
        ),
        "checkin-pair": (
            _checkin("checkin-pair"),
            False,
            "lower bound on the shuffled check-in RDP (one neighbouring pair)",
            "exact Rényi moment of one pair under shuffled check-in (docs/accounting/shuffle.md)",
        ),
        "checkin-chernoff": (
            _checkin("checkin-chernoff"),
            False,
            "estimate: rests on LT22 Conjecture 1 and uses rate gamma instead of k/n",
            "LT22 Thm 3 as printed",
        ),
    }
)


@dataclass(frozen=True)
class ShuffleRound(PrivacyEvent):
    """One round of the shuffle model with Gaussian randomizers (Liew & Takahashi 2022; Liew, Hasegawa &
    Takahashi 2022).

    Mechanism: each of ``n`` users adds N(0, ``sigma``^2) noise to its value (L2 sensitivity 1) and the
    reports are shuffled; with ``gamma``, each user checks in independently with probability gamma (shuffled
    check-in), without it every user reports. Neighbouring relation: ``replace-one`` (one user's value
    replaced). Observer: the analyst, who sees the shuffled reports. This event carries no bound: the
    :class:`ShuffleAccountant`'s ``method`` (a key of :data:`SHUFFLE_BOUNDS`) says which RDP curve is used, and
    only ``"gaussian-upper"`` and ``"checkin-upper"`` are upper bounds.
    """

    n: int
    sigma: float
    gamma: float | None = None
    neighbouring: str = "replace-one"

    def __post_init__(self) -> None:
        object.__setattr__(self, "n", check_int("n", self.n, lo=1))
        object.__setattr__(self, "sigma", check_real("sigma", self.sigma, lo=0.0, lo_open=True))
        if self.gamma is not None:
            object.__setattr__(self, "gamma", check_real("gamma", self.gamma, lo=0.0, hi=1.0, lo_open=True))
        if self.neighbouring != "replace-one":
            raise ParameterError(
                f"Argument 'neighbouring' must be 'replace-one' for a shuffle round, not {self.neighbouring!r}."
            )

    def describe(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "n": self.n, "sigma": self.sigma, "gamma": self.gamma}


def _check_shuffle_orders(orders: Any) -> npt.NDArray[np.int64]:
    raw = np.arange(2, 257) if orders is None else np.asarray(orders)
    o = raw.astype(np.int64) if raw.dtype.kind in "iuf" else np.zeros(0, dtype=np.int64)
    if raw.ndim != 1 or o.size == 0 or np.any(o < 2) or not np.array_equal(o, raw):
        raise ParameterError(f"Argument 'orders' must be a non-empty 1-D sequence of integers >= 2, not {orders!r}.")
    return o


class ShuffleAccountant(PrivacyAccountant):
    """Accountant for :class:`ShuffleRound` events under one shuffle bound (the :class:`PrivacyAccountant`
    contract).

    ``method``: a key of :data:`SHUFFLE_BOUNDS`; its RDP curve of one round is composed over the rounds by
    addition (Mironov 2017, Prop. 1) and converted by Canonne, Kamath & Steinke 2020, Prop. 12. The
    certificate is labelled by the bound: ``certificate=True`` (``bound="upper"``) only for
    ``"gaussian-upper"`` and ``"checkin-upper"``, else ``certificate=False`` with ``bound="estimate"`` (the
    upper-bound conversion of a lower RDP curve is neither bound on epsilon). Repetitions of one round only
    (the certificate's ``detail`` names its n, sigma and gamma). ``orders``: integers >= 2 (default 2..256).
    Observer: the analyst; relation: replace-one.
    """

    def __init__(self, method: str = "gaussian-upper", *, orders: Any = None) -> None:
        if method not in SHUFFLE_BOUNDS:
            raise ParameterError(f"Argument 'method' must be one of {tuple(SHUFFLE_BOUNDS)}, not {method!r}.")
        super().__init__("replace-one", observer="analyst")
        self.bound_name = method
        self.method = f"shuffle-{method}"
        self.citation = SHUFFLE_BOUNDS[method][3]
        self.orders = _check_shuffle_orders(orders)
        self._total = np.zeros(self.orders.size, dtype=np.float64)
        self._round: ShuffleRound | None = None
        self._count = 0

    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        ev = event.event if isinstance(event, SelfComposed) else event
        if not isinstance(ev, ShuffleRound):
            return ev, "the shuffle accountant composes ShuffleRound events (or a SelfComposed of one)"
        if self.bound_name.startswith("checkin") and ev.gamma is None:
            return ev, f"the shuffled check-in bound {self.bound_name!r} needs the round's check-in rate 'gamma'"
        if self._round is not None and ev != self._round:
            return ev, "the shuffle accountant certifies repetitions of one round; a different round is composed"
        return None

    def _compose(self, event: PrivacyEvent, count: int) -> None:
        reps = event.count if isinstance(event, SelfComposed) else 1
        ev = event.event if isinstance(event, SelfComposed) else event
        if not isinstance(ev, ShuffleRound):  # pragma: no cover - compose() checked support first
            raise ParameterError(f"Event {type(ev).__name__} is not a shuffle round.")
        curve = SHUFFLE_BOUNDS[self.bound_name][0]
        with np.errstate(over="ignore"):
            total = self._total + (reps * count) * curve([int(x) for x in self.orders], ev.n, ev.sigma, ev.gamma)
        self._total, self._round, self._count = total, ev, self._count + reps * count

    @property
    def rdp(self) -> npt.NDArray[np.float64]:
        """The composed RDP curve at :attr:`orders` (a copy): the bound's curve times the rounds."""
        return self._total.copy()

    def get_epsilon(self, delta: float) -> float:
        return self.certificate(delta).epsilon

    def get_delta(self, epsilon: float) -> float:
        e = check_real("epsilon", epsilon, lo=0.0)
        return dp_delta(self.orders, self._total, e)[0]

    def certificate(self, delta: float) -> Certificate:
        d = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        _, certifies, what, citation = SHUFFLE_BOUNDS[self.bound_name]
        eps, order = rdp_to_dp(self.orders, self._total, d, warn=False)
        ev = self._round
        return Certificate(
            epsilon=eps,
            delta=d,
            observer="analyst",
            neighbouring="replace-one",
            method=self.method,
            certificate=certifies,
            bound="upper" if certifies else "estimate",
            citation=citation,
            order=order,
            detail={
                "rdp_curve": what,
                "rounds": self._count,
                "n": None if ev is None else ev.n,
                "sigma": None if ev is None else ev.sigma,
                "gamma": None if ev is None else ev.gamma,
            },
        )

    def fresh(self) -> Self:
        return type(self)(self.bound_name, orders=self.orders)


def shuffle_certificate(
    bound: str,
    *,
    n: int,
    sigma: float,
    rounds: int,
    delta: float,
    gamma: float | None = None,
    orders: Any = None,
) -> Certificate:
    """The :class:`Certificate` record of ``rounds`` rounds of the shuffle bound ``bound`` (a key of
    :data:`SHUFFLE_BOUNDS`) for ``n`` users with noise std ``sigma`` (check-in bounds: probability ``gamma``):
    ``ShuffleAccountant(bound, orders=orders).compose(ShuffleRound(n, sigma, gamma), rounds)``.

    ``certificate`` is True only for ``"gaussian-upper"`` and ``"checkin-upper"``; ``orders`` are integers
    >= 2 (default 2..256)."""
    if bound not in SHUFFLE_BOUNDS:
        raise ParameterError(f"Argument 'bound' must be one of {tuple(SHUFFLE_BOUNDS)}, not {bound!r}.")
    if bound.startswith("checkin") and gamma is None:
        raise ParameterError(f"Argument 'gamma' is required for the shuffled check-in bound {bound!r}, not None.")
    t = check_int("rounds", rounds, lo=1)
    acc = ShuffleAccountant(bound, orders=orders)
    return acc.compose(ShuffleRound(n, sigma, gamma), t).certificate(delta)
