"""The shuffle bounds reported through the accountant contract's :class:`Certificate` record.

Each bound is an RDP curve of one round, composed over T rounds (Mironov 2017, Prop. 1) and converted to
(epsilon, delta) by Canonne, Kamath & Steinke 2020, Prop. 12. Only an UPPER bound on the RDP gives a
certificate; a curve that is a lower bound on the mechanism's RDP (one neighbouring pair) or an unproven
estimate gives ``certificate=False`` with ``bound="estimate"``: the upper-bound conversion of a lower RDP
curve is neither an upper nor a lower bound on the mechanism's epsilon. Neighbouring relation: replace-one
(one user's value, L2 sensitivity 1, replaced). Observer: the analyst, who sees the shuffled reports.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Self

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant
from secagg_dp.accounting.core.conversion import dp_delta, rdp_to_dp, rdp_to_dp_mironov
from secagg_dp.accounting.core.events import PrivacyEvent, SelfComposed
from secagg_dp.errors import ParameterError

__all__ = [
    "LDP_SHUFFLE_BOUNDS",
    "SHUFFLE_BOUNDS",
    "LDPShuffleRound",
    "ShuffleAccountant",
    "ShuffleRound",
    "shuffle_certificate",
]

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


class _ShuffledRound:
    """Mixin of the two shuffle rounds, what they share: ``n`` users, the randomizer's parameter (the field named by
    ``_PARAMETER``), an optional check-in rate ``gamma``; their checks and their description."""

    _PARAMETER: ClassVar[str]
    n: int
    gamma: float | None
    neighbouring: str

    def __post_init__(self) -> None:
        """``n`` >= 1, the randomizer's parameter > 0, ``gamma`` in (0, 1] when given, relation ``replace-one``."""
        scale = self._PARAMETER
        object.__setattr__(self, "n", check_int("n", self.n, lo=1))
        object.__setattr__(self, scale, check_real(scale, getattr(self, scale), lo=0.0, lo_open=True))
        if self.gamma is not None:
            object.__setattr__(self, "gamma", check_real("gamma", self.gamma, lo=0.0, hi=1.0, lo_open=True))
        if self.neighbouring != "replace-one":
            raise ParameterError(
                f"Argument 'neighbouring' must be 'replace-one' for a shuffle round, not {self.neighbouring!r}."
            )

    def describe(self) -> dict[str, Any]:
        """Type name, ``n``, the randomizer's parameter and ``gamma`` (the relation is always replace-one)."""
        scale = self._PARAMETER
        return {"type": type(self).__name__, "n": self.n, scale: getattr(self, scale), "gamma": self.gamma}


@dataclass(frozen=True)
class ShuffleRound(_ShuffledRound, PrivacyEvent):
    """One round of the shuffle model with Gaussian randomizers (Liew & Takahashi 2022; Liew, Hasegawa &
    Takahashi 2022).

    Mechanism: each of ``n`` users adds N(0, ``sigma``^2) noise to its value (L2 sensitivity 1) and the
    reports are shuffled; with ``gamma``, each user checks in independently with probability gamma (shuffled
    check-in), without it every user reports. Neighbouring relation: ``replace-one`` (one user's value
    replaced). Observer: the analyst, who sees the shuffled reports. This event carries no bound: the
    :class:`ShuffleAccountant`'s ``method`` (a key of :data:`SHUFFLE_BOUNDS`) says which RDP curve is used, and
    only ``"gaussian-upper"`` and ``"checkin-upper"`` are upper bounds.
    """

    _PARAMETER: ClassVar[str] = "sigma"
    n: int
    sigma: float
    gamma: float | None = None
    neighbouring: str = "replace-one"


@dataclass(frozen=True)
class LDPShuffleRound(_ShuffledRound, PrivacyEvent):
    """One round of the shuffle model with pure ``eps0``-LDP randomizers (the self check-in draft of Liew,
    Hasegawa & Takahashi): each of ``n`` users reports through an eps0-DP local randomizer and the reports are
    shuffled; with ``gamma``, each user checks in independently with probability gamma. Neighbouring relation:
    ``replace-one``. Carries no bound: the :class:`ShuffleAccountant`'s ``method`` (a key of
    :data:`LDP_SHUFFLE_BOUNDS`) or ``observer="server"`` says which RDP curve is used.
    """

    _PARAMETER: ClassVar[str] = "eps0"
    n: int
    eps0: float
    gamma: float | None = None
    neighbouring: str = "replace-one"


def _ldp_draft(upper: bool) -> _Curve:
    def curve(o: list[int], n: int, eps0: float, gamma: float | None) -> npt.NDArray[np.float64]:
        from secagg_dp.accounting.shuffle import ldp

        if gamma is None:
            raise ParameterError("Argument 'gamma' is required for the self check-in draft's bounds, not None.")
        fn = ldp.seed000_upper_rdp if upper else ldp.seed000_lower_rdp
        return np.asarray(fn(eps0, n=n, gamma=gamma, orders=o), dtype=np.float64)

    return curve


_DRAFT = "self check-in draft (Liew, Hasegawa & Takahashi, workshop draft)"
#: name -> (RDP curve of an :class:`LDPShuffleRound`, certificate?, what the curve is, citation); neither certifies.
LDP_SHUFFLE_BOUNDS: Mapping[str, tuple[_Curve, bool, str, str]] = MappingProxyType(
    {
        "ldp-draft-upper": (
            _ldp_draft(True),
            False,
            "estimate: the draft's Thm 2 as read, below the exact RDP of binary randomized response at small n gamma",
            f"{_DRAFT}, Thm 2 (read as an estimate)",
        ),
        "ldp-draft-lower": (
            _ldp_draft(False),
            False,
            "lower bound on the RDP for one eps0-LDP randomizer (binary randomized response)",
            f"{_DRAFT}, Thm 3 (RDP lower bound, binary randomized response)",
        ),
    }
)

_SERVER_CITATION = (
    "server view (reports seen before shuffling, participation revealed): Gaussian randomizer Mironov 2017, "
    "Prop. 7, or eps0-DP via randomized response (Kairouz, Oh & Viswanath 2015, Thm 2.5); revealed flag: exact "
    "Rényi moment of the flag-weighted mixture; Canonne, Kamath & Steinke 2020, Prop. 12"
)
#: RDP -> (epsilon, delta) conversions of :class:`ShuffleAccountant`: Canonne, Kamath & Steinke 2020, Prop. 12
#: (``"cks"``) or the looser Mironov 2017, Prop. 3 (``"mironov"``, a labelled comparison).
_CONVERSIONS: tuple[str, str] = ("cks", "mironov")


def _server_round_rdp(ev: ShuffleRound | LDPShuffleRound, orders: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Per-round RDP against a party that sees each report before shuffling: the local randomizer alone
    (Gaussian with L2 sensitivity 1, Mironov 2017 Prop. 7; eps0-DP via ``pure_dp_to_rdp``), with check-in the
    revealed participation flag (``revealed_participation_rdp``; exact for a revealed flag)."""
    from secagg_dp.accounting.core.conversion import pure_dp_to_rdp
    from secagg_dp.accounting.core.rdp import gaussian_rdp
    from secagg_dp.accounting.core.subsampling import revealed_participation_rdp

    base = pure_dp_to_rdp(ev.eps0, orders) if isinstance(ev, LDPShuffleRound) else gaussian_rdp(orders, ev.sigma, 1.0)
    rate = 1.0 if ev.gamma is None else ev.gamma
    return np.asarray(revealed_participation_rdp(base, rate, orders), dtype=np.float64)


def _fields_of(ev: ShuffleRound | LDPShuffleRound) -> dict[str, Any]:
    """The round's parameters (``n``, ``sigma`` or ``eps0``, ``gamma``) for a certificate's ``detail``."""
    return {k: v for k, v in ev.describe().items() if k != "type"}


def _check_shuffle_orders(orders: Any) -> npt.NDArray[np.int64]:
    raw = np.arange(2, 257) if orders is None else np.asarray(orders)
    o = raw.astype(np.int64) if raw.dtype.kind in "iuf" else np.zeros(0, dtype=np.int64)
    if raw.ndim != 1 or o.size == 0 or np.any(o < 2) or not np.array_equal(o, raw):
        raise ParameterError(f"Argument 'orders' must be a non-empty 1-D sequence of integers >= 2, not {orders!r}.")
    return o


class ShuffleAccountant(PrivacyAccountant):
    """Accountant for :class:`ShuffleRound` (and :class:`LDPShuffleRound`) events under one shuffle bound
    (the :class:`PrivacyAccountant` contract).

    ``method``: a key of :data:`SHUFFLE_BOUNDS` (Gaussian randomizers, :class:`ShuffleRound`) or of
    :data:`LDP_SHUFFLE_BOUNDS` (eps0-LDP randomizers, :class:`LDPShuffleRound`); its RDP curve of one round
    is composed over the rounds by addition (Mironov 2017, Prop. 1) and converted by ``conversion``:
    ``"cks"`` (Canonne, Kamath & Steinke 2020, Prop. 12, default) or ``"mironov"`` (Mironov 2017, Prop. 3,
    looser; a labelled comparison). Negative curve values (a Rényi divergence is >= 0; they are rounding of
    a bound near 0) are converted as 0; the conversion's warnings (e.g. the optimum at the largest order)
    are returned in the certificate's ``detail["caveats"]``. The certificate is labelled by the bound:
    ``certificate=True`` (``bound="upper"``) only for ``"gaussian-upper"`` and ``"checkin-upper"``, else
    ``certificate=False`` with ``bound="estimate"`` (the upper-bound conversion of a lower RDP curve is
    neither bound on epsilon). Repetitions of one round only (the certificate's ``detail`` names the round).
    ``orders``: integers >= 2 (default 2..256). Relation: replace-one.

    ``observer="analyst"`` (default) sees the shuffled reports. ``observer="server"`` sees each report
    before shuffling (an untrusted shuffler or collecting server): only the local randomizer protects, with
    check-in the revealed participation flag (``method`` is then not used; a certificate for either event).
    """

    def __init__(
        self,
        method: str = "gaussian-upper",
        *,
        orders: Any = None,
        observer: str = "analyst",
        conversion: str = "cks",
    ) -> None:
        if method not in SHUFFLE_BOUNDS and method not in LDP_SHUFFLE_BOUNDS:
            raise ParameterError(
                f"Argument 'method' must be one of {tuple(SHUFFLE_BOUNDS) + tuple(LDP_SHUFFLE_BOUNDS)}, not {method!r}."
            )
        if observer not in ("analyst", "server"):
            raise ParameterError(f"Argument 'observer' must be 'analyst' or 'server', not {observer!r}.")
        if conversion not in _CONVERSIONS:
            raise ParameterError(f"Argument 'conversion' must be one of {_CONVERSIONS}, not {conversion!r}.")
        super().__init__("replace-one", observer=observer)
        self.bound_name = method
        self.conversion = conversion
        bounds = SHUFFLE_BOUNDS if method in SHUFFLE_BOUNDS else LDP_SHUFFLE_BOUNDS
        self._bound: tuple[_Curve | None, bool, str, str] = (
            bounds[method] if observer == "analyst" else (None, True, "upper bound", _SERVER_CITATION)
        )
        self.method = f"shuffle-{method}" if observer == "analyst" else "shuffle-server-view"
        self.citation = self._bound[3]
        self.orders = _check_shuffle_orders(orders)
        self._total = np.zeros(self.orders.size, dtype=np.float64)
        self._curve = np.zeros(self.orders.size, dtype=np.float64)
        self._round: ShuffleRound | LDPShuffleRound | None = None
        self._count = 0

    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        ev = event.event if isinstance(event, SelfComposed) else event
        if not isinstance(ev, ShuffleRound | LDPShuffleRound):
            return ev, "the shuffle accountant composes ShuffleRound or LDPShuffleRound events (or a SelfComposed)"
        if self.observer == "analyst":
            kind = ShuffleRound if self.bound_name in SHUFFLE_BOUNDS else LDPShuffleRound
            if not isinstance(ev, kind):
                return ev, f"the bound {self.bound_name!r} is for {kind.__name__} events"
            needs_gamma = self.bound_name.startswith("checkin") or kind is LDPShuffleRound
            if needs_gamma and ev.gamma is None:
                return ev, f"the shuffled check-in bound {self.bound_name!r} needs the round's check-in rate 'gamma'"
        if self._round is not None and ev != self._round:
            return ev, "the shuffle accountant certifies repetitions of one round; a different round is composed"
        return None

    def _compose(self, event: PrivacyEvent, count: int) -> None:
        reps = event.count if isinstance(event, SelfComposed) else 1
        ev = event.event if isinstance(event, SelfComposed) else event
        if not isinstance(ev, ShuffleRound | LDPShuffleRound):  # pragma: no cover - compose() checked support
            raise ParameterError(f"Event {type(ev).__name__} is not a shuffle round.")
        fn = self._bound[0]
        if fn is None:  # the server's view: the local randomizer alone
            curve = _server_round_rdp(ev, self.orders)
        else:
            param = ev.sigma if isinstance(ev, ShuffleRound) else ev.eps0
            curve = fn([int(x) for x in self.orders], ev.n, param, ev.gamma)
        with np.errstate(over="ignore"):
            total = self._total + (reps * count) * curve
        self._total, self._curve, self._round, self._count = total, curve, ev, self._count + reps * count

    @property
    def rdp(self) -> npt.NDArray[np.float64]:
        """The composed RDP curve at :attr:`orders` (a copy): the bound's curve times the rounds."""
        return self._total.copy()

    @property
    def round_rdp(self) -> npt.NDArray[np.float64]:
        """The RDP curve of one round of the composed round (a copy; zeros before any composition)."""
        return self._curve.copy()

    def get_epsilon(self, delta: float) -> float:
        return self.certificate(delta).epsilon

    def get_delta(self, epsilon: float) -> float:
        """Smallest delta at ``epsilon`` by the CKS20 inversion (valid for either ``conversion``)."""
        e = check_real("epsilon", epsilon, lo=0.0)
        return dp_delta(self.orders, np.maximum(self._total, 0.0), e)[0]

    def certificate(self, delta: float) -> Certificate:
        d = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
        _, certifies, what, citation = self._bound
        conv = rdp_to_dp if self.conversion == "cks" else rdp_to_dp_mironov
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            eps, order = conv(self.orders, np.maximum(self._total, 0.0), d, warn=True)
        ev = self._round
        return Certificate(
            epsilon=eps,
            delta=d,
            observer=self.observer,
            neighbouring="replace-one",
            method=self.method,
            certificate=certifies,
            bound="upper" if certifies else "estimate",
            citation=citation,
            order=order,
            detail={
                "rdp_curve": what,
                "rounds": self._count,
                "conversion": self.conversion,
                "caveats": [str(w.message) for w in caught],
                **({"n": None, "sigma": None, "gamma": None} if ev is None else _fields_of(ev)),
            },
        )

    def fresh(self) -> Self:
        return type(self)(self.bound_name, orders=self.orders, observer=self.observer, conversion=self.conversion)


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
