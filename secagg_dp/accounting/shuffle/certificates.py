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
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.accounting.core.accountant import Certificate
from secagg_dp.accounting.core.conversion import rdp_to_dp
from secagg_dp.errors import ParameterError

__all__ = ["SHUFFLE_BOUNDS", "shuffle_certificate"]

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
    :data:`SHUFFLE_BOUNDS`) for ``n`` users with noise std ``sigma`` (check-in bounds: probability ``gamma``).

    ``certificate`` is True only for ``"gaussian-upper"`` and ``"checkin-upper"``; ``orders`` are integers
    >= 2 (default 2..256)."""
    if bound not in SHUFFLE_BOUNDS:
        raise ParameterError(f"Argument 'bound' must be one of {tuple(SHUFFLE_BOUNDS)}, not {bound!r}.")
    curve, certifies, what, citation = SHUFFLE_BOUNDS[bound]
    n = check_int("n", n, lo=1)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    t = check_int("rounds", rounds, lo=1)
    d = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    raw = np.arange(2, 257) if orders is None else np.asarray(orders)
    o = raw.astype(np.int64) if raw.dtype.kind in "iuf" else np.zeros(0, dtype=np.int64)
    if raw.ndim != 1 or o.size == 0 or np.any(o < 2) or not np.array_equal(o, raw):
        raise ParameterError(f"Argument 'orders' must be a non-empty 1-D sequence of integers >= 2, not {orders!r}.")
    with np.errstate(over="ignore"):
        total = t * curve([int(x) for x in o], n, sigma, gamma)
    eps, order = rdp_to_dp(o, total, d, warn=False)
    return Certificate(
        epsilon=eps,
        delta=d,
        observer="analyst",
        neighbouring="replace-one",
        method=f"shuffle-{bound}",
        certificate=certifies,
        bound="upper" if certifies else "estimate",
        citation=citation,
        order=order,
        detail={"rdp_curve": what, "rounds": t, "n": n, "sigma": sigma, "gamma": gamma},
    )
