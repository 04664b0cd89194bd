"""The check-in accountant: :class:`CheckinRound` events under the accountant contract, three methods.

* ``method="rdp"``: per-round RDP of the binomial mixture (SCI22 Thm 1 / Eq. 5; Liew, Hasegawa & Takahashi
  2022, Thm 2 and 4), composed by addition (Mironov 2017, Prop. 1) and converted by Canonne, Kamath & Steinke
  2020, Prop. 12. Any sequence of rounds.
* ``method="window"``: the window certificate of :func:`~secagg_dp.accounting.checkin.mixture.window_certificate`
  (RDP of the mixture conditioned on K in a window, plus the excluded mass in delta) for T repetitions of ONE
  round with check-in probability gamma.
* ``method="pld"``: the privacy-loss-distribution certificate of
  :func:`~secagg_dp.accounting.checkin.pld.checkin_pld` (Zhu, Dong & Wang 2022, Thm 10; Connect-the-Dots,
  Doroshenko et al. 2022) for T repetitions of ONE round whose base mechanism is the Gaussian sum
  (:class:`~secagg_dp.accounting.checkin.bases.GaussianSum`, replace-one) with check-in probability gamma.

``observer="analyst"`` certifies what the analyst sees (K and the aggregate: the round's own provider);
``observer="server"`` what the secure-aggregation server sees, which also learns who took part: each round's
base mechanism is re-wrapped by :func:`~secagg_dp.accounting.checkin.observers.server_view_provider`
(the PLD method has its own server view); ``observer="coalition"`` (with ``coalition=Coalition(c, m)``) what
an active server colluding with c clients sees, which may also exclude honest clients down to sums of m
clients: each round's base mechanism is re-wrapped by
:func:`~secagg_dp.accounting.checkin.coalition.coalition_view_provider` (the PLD method: ``checkin_pld`` with
the same coalition). The certificate's ``detail`` then holds ``colluders`` and ``min_sum``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self, TypeVar

import numpy as np
import numpy.typing as npt

from secagg_dp.accounting.checkin.events import CheckinRound
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant, delta_by_bisection
from secagg_dp.accounting.core.conversion import LargestOrderWarning
from secagg_dp.accounting.core.events import PrivacyEvent, SelfComposed
from secagg_dp.accounting.core.rdp_accountant import RdpAccountant
from secagg_dp.errors import ParameterError

if TYPE_CHECKING:
    from secagg_dp.accounting.checkin.coalition import Coalition

__all__ = [
    "CHECKIN_METHODS",
    "CheckinAccountant",
    "CheckinPldAccountant",
    "CheckinRdpAccountant",
    "CheckinWindowAccountant",
    "pld_supports",
    "tightest_method",
]

#: The check-in accountant's methods.
CHECKIN_METHODS: tuple[str, str, str] = ("rdp", "window", "pld")

_CITATIONS = {
    "rdp": "check-in mixture RDP: SCI22 Thm 1 / Eq. 5, Liew, Hasegawa & Takahashi 2022, Thm 2 and 4; composition: "
    "Mironov 2017, Prop. 1; RDP -> (epsilon, delta): Canonne, Kamath & Steinke 2020, Prop. 12",
    "window": "window certificate (docs/accounting/checkin.md): the check-in mixture RDP conditioned on K in a "
    "window plus T P(K outside) in delta; conversion Canonne, Kamath & Steinke 2020, Prop. 12",
    "pld": "Zhu, Dong & Wang 2022, Thm 10 (dominating pair of the subsampled Gaussian); Connect-the-Dots, "
    "Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1; proofs in docs/accounting/pld.md",
}
_EX_POST_CITATION = (
    "server ex-post view (participation revealed, the target in every round: K = 1 + K', K' ~ Bin(n - 1, gamma)), "
    "docs/accounting/observers.md; composition: Mironov 2017, Prop. 1; RDP -> (epsilon, delta): Canonne, Kamath & "
    "Steinke 2020, Prop. 12"
)
_COALITION_CITATION = (
    "; coalition view (server + colluders, sums of at least min_sum clients): Bonawitz et al. 2017, Sec. 6; "
    "Bell et al. 2020; docs/accounting/observers.md"
)


_E = TypeVar("_E", bound=PrivacyEvent)


def repeated_event(event: Any, kind: type[_E]) -> tuple[_E, int] | None:
    """(event, repetitions) for an event of type ``kind`` or a SelfComposed of one, else None."""
    if isinstance(event, kind):
        return event, 1
    if isinstance(event, SelfComposed) and isinstance(event.event, kind):
        return event.event, event.count
    return None


def _round_of(event: Any) -> tuple[CheckinRound, int] | None:
    """(round, repetitions) for a CheckinRound or a SelfComposed of one, else None."""
    return repeated_event(event, CheckinRound)


def pld_supports(event: Any) -> bool:
    """True if ``event`` is a check-in round the PLD method certifies: a Gaussian-sum base
    (:class:`~secagg_dp.accounting.checkin.bases.GaussianSum`) amplified at rate k/n, replace-one, with gamma."""
    r = _round_of(event)
    return r is not None and _pld_reason(r[0]) is None


def _pld_reason(ev: CheckinRound) -> str | None:
    from secagg_dp.accounting.checkin.bases import GaussianSum
    from secagg_dp.accounting.checkin.mixture import SubsampledCheckin

    p = ev.provider
    if not (isinstance(p, SubsampledCheckin) and type(p.mechanism) is GaussianSum):
        return "the PLD method needs a SubsampledCheckin provider over a GaussianSum base mechanism"
    if p.rate != "k/n" or p.amplification in ("joint-convexity", "none"):
        return "the PLD method certifies the analyst view of the round (rate k/n, subsampling amplification)"
    if ev.gamma is None:
        return "the PLD method needs check-in with probability gamma (not fixed-size sampling)"
    return None


class CheckinAccountant(PrivacyAccountant):
    """Accountant for :class:`CheckinRound` events (the :class:`PrivacyAccountant` contract).

    ``method`` is ``"rdp"`` (any rounds), ``"window"`` or ``"pld"`` (T repetitions of one round; a different
    round is refused). ``orders``: integer Rényi orders (default: the check-in grid, integers 2..256 then
    every 16th to 1024). ``window`` (method ``"window"`` only): a fixed client-count window [k_lo, k_hi]
    instead of the best of the candidate windows (valid for any window with T P(K outside) < delta; fixing it
    lets round-by-round certificates reuse one mixture). ``coalition``: the
    :class:`~secagg_dp.accounting.checkin.coalition.Coalition` (colluders, min_sum), required for and only for
    ``observer="coalition"``. ``ex_post`` (observer ``"server"``, method ``"rdp"`` only): the EX-POST bound for a
    client the server saw in every round (:func:`~secagg_dp.accounting.checkin.observers.server_ex_post_certificate`;
    labelled ``detail["ex_post"] = True``; not the ex-ante guarantee). See the module docstring for mechanisms
    and sources.
    """

    citation = _CITATIONS["rdp"]

    def __init__(
        self,
        method: str = "rdp",
        neighbouring: str = "replace-one",
        *,
        orders: Any = None,
        observer: str = "analyst",
        window: tuple[int, int] | None = None,
        coalition: Coalition | None = None,
        ex_post: bool = False,
    ) -> None:
        super().__init__(neighbouring, observer=observer)
        self.coalition = _check_coalition_arg(self.observer, coalition)
        if method not in CHECKIN_METHODS:
            raise ParameterError(f"Argument 'method' must be one of {CHECKIN_METHODS}, not {method!r}.")
        if not isinstance(ex_post, bool) or (ex_post and (self.observer != "server" or method != "rdp")):
            raise ParameterError(
                f"Argument 'ex_post' must be True only with observer 'server' and method 'rdp' (False otherwise), "
                f"not {ex_post!r} with observer {self.observer!r} and method {method!r}."
            )
        self.ex_post = ex_post
        if window is not None and (method != "window" or len(window) != 2 or not 0 <= window[0] <= window[1]):
            raise ParameterError(
                f"Argument 'window' must be a pair 0 <= k_lo <= k_hi for method 'window' (or None), not {window!r}."
            )
        self.window = None if window is None else (int(window[0]), int(window[1]))
        from secagg_dp.accounting.checkin.mixture import DEFAULT_ORDERS

        self.method = method
        self._rdp = RdpAccountant(neighbouring, DEFAULT_ORDERS if orders is None else orders, observer=observer)
        if not np.array_equal(self._rdp.orders, np.round(self._rdp.orders)):
            raise ParameterError("Argument 'orders' must be integers >= 2 for the check-in mixture.")
        self._ex_post_rdp = np.zeros(self._rdp.orders.size)  # ex_post: sum of count * eps_ex-post(lam)
        self._round: CheckinRound | None = None  # window / pld: the one round being repeated
        self._count = 0  # window / pld: repetitions of that round
        self._rounds = 0

    @property
    def orders(self) -> npt.NDArray[np.float64]:
        """The Rényi orders of the rdp and window methods."""
        return self._rdp.orders

    @property
    def rounds(self) -> int:
        """Number of rounds composed (repetitions counted)."""
        return self._rounds

    def _view(self, ev: CheckinRound) -> CheckinRound:
        """The round as this accountant's observer sees it (the server: participation revealed)."""
        if self.observer == "analyst":
            return ev
        if self.coalition is not None:
            from secagg_dp.accounting.checkin.coalition import coalition_view_provider

            provider = coalition_view_provider(ev.provider.mechanism, ev.clients, self.coalition, ev.neighbouring)
            return dataclasses.replace(ev, provider=provider)
        from secagg_dp.accounting.checkin.observers import server_view_provider

        return dataclasses.replace(
            ev, provider=server_view_provider(ev.provider.mechanism, ev.clients, ev.neighbouring)
        )

    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        r = _round_of(event)
        if r is None:
            inner = event.event if isinstance(event, SelfComposed) else event
            return inner, "the check-in accountant composes CheckinRound events (or a SelfComposed of one)"
        ev = r[0]
        if ev.neighbouring != self.neighbouring:
            return ev, f"it is '{ev.neighbouring}' but the accountant is '{self.neighbouring}'"
        if self.observer != "analyst" and not hasattr(ev.provider, "mechanism"):
            return ev, f"the {self.observer} view needs a provider with a base 'mechanism' (a SubsampledCheckin)"
        if self.coalition is not None and self.coalition.min_sum > ev.clients:
            return ev, f"its n = {ev.clients} clients is below the coalition's min_sum = {self.coalition.min_sum}"
        if self.method == "rdp":
            return None
        if self.method == "window" and ev.gamma is None:
            return ev, "the window method needs check-in with probability gamma (not fixed-size sampling)"
        if self.method == "pld":
            why = _pld_reason(ev)
            if why is not None:
                return ev, why
        if self._round is not None and ev != self._round and self._count > 0:
            return ev, f"the {self.method} method certifies repetitions of one round; a different round is composed"
        return None

    def _compose(self, event: PrivacyEvent, count: int) -> None:
        r = _round_of(event)
        if r is None:  # pragma: no cover - compose() checked support first
            raise ParameterError(f"Event {type(event).__name__} is not a check-in round.")
        ev, reps = r
        if self.ex_post:
            o = tuple(int(x) for x in self._rdp.orders)
            self._ex_post_rdp = self._ex_post_rdp + (reps * count) * _ex_post_round_rdp(ev, o)
        elif self.method == "rdp":
            self._rdp.compose(self._view(ev), reps * count)
        elif reps * count:
            self._round, self._count = ev, self._count + reps * count
        self._rounds += reps * count

    def _epsilon(self, delta: float) -> tuple[float, float | None, float, dict[str, Any]]:
        """(epsilon, order, slack, detail) at ``delta``."""
        if self.ex_post:
            from secagg_dp.accounting.checkin.mixture import rdp_to_epsilon

            o = self._rdp.orders.astype(np.int64)
            eps_i, order_i = rdp_to_epsilon(orders=o, rdp=self._ex_post_rdp, delta=delta)
            return (
                eps_i,
                float(order_i),
                0.0,
                {"ex_post": True, "window": None, "delta_rdp": delta, "delta_window": 0.0},
            )
        if self.method == "rdp":
            eps, order = self._rdp.get_epsilon_and_order(delta)
            return eps, order, 0.0, {}
        if self._round is None or self._count == 0 or delta >= 1.0:
            return 0.0, None, 0.0, {}
        ev, t = self._round, self._count
        gamma = float(ev.gamma or 0.0)  # unsupported() refused gamma=None for window and pld
        if self.method == "window":
            from secagg_dp.accounting.checkin.mixture import window_certificate

            view = self._view(ev)
            orders = self._rdp.orders.astype(np.int64)
            cert = window_certificate(view.provider, ev.clients, gamma, t, delta, orders, window=self.window)
            detail = {"window": list(cert.window or ()), "delta_rdp": cert.delta_rdp, "delta_window": cert.delta_window}
            return cert.epsilon, None if cert.order is None else float(cert.order), 0.0, detail
        from secagg_dp.accounting.checkin.pld import checkin_pld

        pld = checkin_pld(
            ev.clients, gamma, ev.provider.mechanism.sigma, t, delta, observer=self.observer, coalition=self.coalition
        )
        slack = pld.epsilon - min(pld.epsilon_optimistic, pld.epsilon) if math.isfinite(pld.epsilon) else math.inf
        detail = {
            "epsilon_optimistic": pld.epsilon_optimistic,
            "delta_tail": pld.delta_tail,
            "window": list(pld.window),
        }
        return pld.epsilon, None, slack, detail

    def get_epsilon(self, delta: float) -> float:
        with _quiet():
            return self._epsilon(float(delta))[0]

    def get_delta(self, epsilon: float) -> float:
        if self.ex_post:
            from secagg_dp.accounting.core.conversion import dp_delta

            return dp_delta(self._rdp.orders, self._ex_post_rdp, epsilon)[0]
        if self.method == "rdp":
            return self._rdp.get_delta(epsilon)
        if self._round is None or self._count == 0:
            return 0.0
        return delta_by_bisection(self.get_epsilon, epsilon)

    def certificate(self, delta: float) -> Certificate:
        with _quiet():
            eps, order, slack, detail = self._epsilon(float(delta))
        return self._upper_bound(
            eps,
            delta,
            citation=_EX_POST_CITATION
            if self.ex_post
            else _CITATIONS[self.method] + ("" if self.coalition is None else _COALITION_CITATION),
            slack=slack,
            order=order,
            detail={
                "rounds": self.rounds,
                # the optimum at the largest order offered: larger orders may give a smaller epsilon
                "optimal_order_is_largest": order is not None and order == float(self._rdp.orders.max()),
                **detail,
                **({} if self.coalition is None else self.coalition.as_dict()),
            },
        )

    def fresh(self) -> Self:
        return type(self)(
            self.method,
            self.neighbouring,
            orders=self._rdp.orders,
            observer=self.observer,
            window=self.window,
            coalition=self.coalition,
            ex_post=self.ex_post,
        )


def _ex_post_round_rdp(ev: CheckinRound, orders: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Per-round RDP against the server for a client that took part (ex-post; docs/accounting/observers.md):
    check-in, 1/(lam-1) log E[e^{(lam-1) eps_base,1+K'(lam)}], K' ~ Bin(n-1, gamma)
    (:func:`~secagg_dp.accounting.checkin.observers.server_ex_post_log_moment`); fixed-size sampling of m
    clients, the base mechanism at K = m. T rounds compose to T times this curve (Mironov 2017, Prop. 1).
    Cached for hashable (frozen) rounds: a run certifies round after round with one curve."""
    try:
        return _cached_ex_post_round_rdp(ev, orders)
    except TypeError:  # an unhashable provider or mechanism: no cache
        return _ex_post_round_rdp_uncached(ev, orders)


def _ex_post_round_rdp_uncached(ev: CheckinRound, orders: tuple[int, ...]) -> npt.NDArray[np.float64]:
    o = np.asarray(orders, dtype=np.int64)
    mech = ev.provider.mechanism
    if ev.gamma is None:  # fixed-size: the target is one of the m clients of every round it is in
        m = np.array([float(ev.sample_size or 0)])
        curve: npt.NDArray[np.float64] = np.asarray(mech.rdp_upper(m, m, o), dtype=np.float64)[0]
        return curve
    from secagg_dp.accounting.checkin.observers import server_ex_post_log_moment

    with warnings.catch_warnings():  # n = 1: the binomial pmf takes log(0) (numpy's RuntimeWarning), nothing else
        warnings.simplefilter("ignore", RuntimeWarning)
        moment = server_ex_post_log_moment(mech, ev.clients, float(ev.gamma), o, neighbouring=ev.neighbouring)
    return np.asarray(moment / (o - 1.0), dtype=np.float64)


@functools.lru_cache(maxsize=32)
def _cached_ex_post_round_rdp(ev: CheckinRound, orders: tuple[int, ...]) -> npt.NDArray[np.float64]:
    out = _ex_post_round_rdp_uncached(ev, orders)
    out.setflags(write=False)
    return out


def _check_coalition_arg(observer: str, coalition: Any) -> Coalition | None:
    """The coalition of observer ``"coalition"`` (required there), None for the other observers (refused)."""
    if observer != "coalition":
        if coalition is not None:
            raise ParameterError(
                f"Argument 'coalition' is for observer 'coalition' only, not observer {observer!r}. To fix, pass "
                "observer='coalition' or drop coalition."
            )
        return None
    from secagg_dp.accounting.checkin.coalition import Coalition, _check_coalition

    if coalition is None:
        raise ParameterError(
            "Argument 'coalition' is required for observer 'coalition': pass "
            f"coalition={Coalition.__name__}(colluders, min_sum)."
        )
    return _check_coalition(coalition)


def tightest_method(
    event: PrivacyEvent,
    rounds: int,
    delta: float,
    *,
    orders: Any = None,
    observer: str = "analyst",
    methods: tuple[str, ...] = CHECKIN_METHODS,
    coalition: Coalition | None = None,
) -> tuple[str, dict[str, float]]:
    """The certified method with the smallest epsilon for ``rounds`` repetitions of ``event`` at ``delta``.

    Every method in ``methods`` that supports the round (and can certify it: a method that raises
    :class:`ParameterError`, e.g. a PLD grid out of range, is skipped) is evaluated; the smallest epsilon wins,
    ties going to the earlier method in ``methods``. The choice depends only on the mechanism's parameters,
    never on data, so the certificate of the chosen method is valid. Returns (method, {method: epsilon}).
    ``coalition`` as in :class:`CheckinAccountant` (observer ``"coalition"``).
    """
    from secagg_dp._validate import check_int

    t = check_int("rounds", rounds, lo=1)
    results: dict[str, float] = {}
    for m in methods:
        acc = CheckinAccountant(
            m, getattr(event, "neighbouring", "replace-one"), orders=orders, observer=observer, coalition=coalition
        )
        if not acc.supports(event):
            continue
        try:
            results[m] = acc.compose(event, t).get_epsilon(delta)
        except ParameterError:
            continue
    if not results:
        raise ParameterError(f"No check-in method among {methods} certifies event {type(event).__name__}.")
    best = min(results, key=lambda m: (results[m], methods.index(m)))
    return best, results


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Largest-order warnings are reported through the certificate's order, not raised here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LargestOrderWarning)
        yield


class _OneMethod(CheckinAccountant):
    """A :class:`CheckinAccountant` fixed to one method (the registry's one class per method)."""

    METHOD = "rdp"

    def __init__(self, method: str | None = None, neighbouring: str = "replace-one", **options: Any) -> None:
        if method not in (None, self.METHOD):
            raise ParameterError(f"Argument 'method' of {type(self).__name__} must be {self.METHOD!r}, not {method!r}.")
        super().__init__(self.METHOD, neighbouring, **options)


class CheckinRdpAccountant(_OneMethod):
    """``CheckinAccountant("rdp", ...)``: the full check-in mixture RDP, any sequence of rounds."""

    METHOD = "rdp"


class CheckinWindowAccountant(_OneMethod):
    """``CheckinAccountant("window", ...)``: the window certificate of T repetitions of one round."""

    METHOD = "window"


class CheckinPldAccountant(_OneMethod):
    """``CheckinAccountant("pld", ...)``: the PLD certificate of T repetitions of one Gaussian-sum round."""

    METHOD = "pld"
