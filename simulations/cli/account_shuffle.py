"""``secagg-dp account shuffle-gaussian`` and ``secagg-dp account shuffled-checkin``.

JSON keys: ``epsilon``, ``delta``, ``order``, ``method``, ``neighbouring``, ``bound`` (what the epsilon is:
"upper", "rdp-lower" or "estimate"), ``certificate`` (true only for proven upper bounds), ``caveats``;
``shuffle-gaussian`` also ``epsilon_lower`` (an object labelled ``bound: "lower"``: a proven lower bound on the
epsilon itself, from the sum of one pair's shuffled reports); with ``--rdp`` also ``rdp`` (orders and values of
the per-round RDP curve) and ``rdp_bound`` (what that CURVE is:
"upper", "lower" or "estimate"). "rdp-lower" marks an epsilon obtained by passing an RDP LOWER bound (one
neighbouring pair, or one randomizer) through the upper-bound RDP->DP conversion (Canonne, Kamath & Steinke
2020, Prop. 12): it is neither an upper nor a lower bound on the mechanism's epsilon. An "rdp-lower" or
"estimate" result is never a privacy certificate. The ``--eps0`` methods are all estimates or converted RDP
lower bounds: ``seed000-upper`` (the self check-in draft's Thm 2, Liew, Hasegawa & Takahashi, workshop draft;
the value's name is kept for compatibility) is below the exact privacy loss of binary randomized response at
small n*gamma, so it is reported as ``bound: "estimate"``, ``certificate: false``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from simulations.cli._args import DELTA, MAX_SHUFFLE_ORDER, POSITIVE, Subparsers, int_in, max_order_flag, real_in
from simulations.cli._output import INFINITE_EPSILON, dumps, rdp_curve

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from secagg_dp.accounting.shuffle.certificates import LDPShuffleRound, ShuffleRound
    from secagg_dp.accounting.shuffle.ldp import LDPResult

    #: the integer RDP orders of these commands, 2 .. --max-order
    Orders = npt.NDArray[np.int64]

__all__ = ["register_account"]

_GAUSS_METHODS = ("windowed", "chernoff", "pair-lower", "gaussian-upper")
_LDP_METHODS = ("approach1", "approach2", "first-cut", "seed000-upper", "seed000-lower")

_CAVEAT_LDP_DELTA = (
    "ESTIMATE, not a certificate: the per-round delta (delta0 through shuffling, sampling and the check-in "
    "mixture) is carried beside the RDP of the epsilon part, a step no cited result proves for this chain "
    "(LHT22 Lemma 1, which it replaces, is false for delta > 0)"
)
#: The ``bound`` of an epsilon converted from an RDP lower bound: neither an upper nor a lower bound on epsilon.
RDP_LOWER = "rdp-lower"
_NOT_EPS_BOUND = (
    "the epsilon shown is its conversion (Canonne, Kamath & Steinke 2020, Prop. 12), neither an upper nor a "
    "lower bound on the mechanism's epsilon; not a certificate"
)
_CAVEAT_LOWER = f"the RDP curve is a lower bound for one neighbouring pair (LHT22 Thm 3); {_NOT_EPS_BOUND}"
_CAVEAT_PAIR_CHECKIN = (
    f"the RDP curve is a lower bound for one neighbouring pair (exact moment of that pair under check-in); "
    f"{_NOT_EPS_BOUND}"
)
_CAVEAT_SEED000_LOWER = (
    "the RDP curve is a lower bound for one eps0-LDP randomizer (binary randomized response, the draft's Thm 3); "
    f"{_NOT_EPS_BOUND}"
)
_CAVEAT_WBK_ON_LOWER = (
    "estimate: WBK subsampling upper bound fed with the shuffle Gaussian LOWER bound "
    "(LHT22 Thm 2, LT22 Eq. 16-17); neither a certificate nor a proven lower bound"
)
_DRAFT = "self check-in draft (Liew, Hasegawa & Takahashi, workshop draft)"
_CAVEAT_DRAFT_UPPER = (
    "ESTIMATE, not a certificate: the draft's Thm 2 with its garbled constants read as in Girgis et al. 2021 is "
    "below the exact privacy loss of binary randomized response at small n*gamma (n=2, gamma=0.1, eps0=1, "
    "T=1, delta=1e-5: eps 0.4307 where the exact delta is 0.0164), and its proof is not available to check"
)


def _common(p: argparse.ArgumentParser, default_order: int) -> None:
    p.add_argument(
        "--n", "--clients", dest="n", type=int_in(1), required=True, help="number of users (alias --clients)"
    )
    p.add_argument("--rounds", type=int_in(1), required=True, help="number of compositions T")
    p.add_argument("--delta", type=DELTA, required=True, help="target delta in (0, 1)")
    max_order_flag(p, MAX_SHUFFLE_ORDER, default_order)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--rdp", action="store_true", help='include the per-round RDP curve {"orders": [...], "values": [...]}'
    )


def register_account(subparsers: Subparsers) -> None:
    """Register ``secagg-dp account shuffle-gaussian`` and ``account shuffled-checkin``."""
    p = subparsers.add_parser(
        "shuffle-gaussian",
        help="shuffle Gaussian RDP (Liew-Takahashi 2022 Thm 1): an RDP LOWER bound, its epsilon not a certificate; "
        "--bound upper gives Corollary 1",
    )
    _common(p, 256)
    p.add_argument("--sigma", type=POSITIVE, required=True, help="per-report Gaussian noise (sensitivity 1)")
    p.add_argument(
        "--bound",
        choices=("lower", "upper"),
        default="lower",
        help='lower: the RDP lower bound of one pair, its epsilon reported as bound "rdp-lower" (neither an upper '
        "nor a lower bound on epsilon); upper: the Gaussian without shuffling, a certificate (default lower)",
    )
    p.add_argument(
        "--conversion",
        choices=("cks", "mironov"),
        default="cks",
        help="RDP->DP: Canonne-Kamath-Steinke 2020 Prop. 12 (default) or Mironov 2017 Prop. 3",
    )
    p.set_defaults(handler=_handle_gaussian)

    q = subparsers.add_parser(
        "shuffled-checkin",
        help="shuffled check-in: Gaussian (--sigma) or eps0-LDP (--eps0 [--delta0]) randomizers",
    )
    _common(q, 64)
    q.add_argument("--gamma", type=real_in(0.0, 1.0, lo_open=True), required=True, help="check-in rate in (0, 1]")
    q.add_argument("--sigma", type=POSITIVE, help="Gaussian randomizer noise (sensitivity 1)")
    q.add_argument("--eps0", type=POSITIVE, help="LDP epsilon of the randomizer")
    q.add_argument("--delta0", type=real_in(0.0, 1.0, hi_open=True), default=0.0, help="LDP delta of the randomizer")
    q.add_argument("--method", choices=_GAUSS_METHODS + _LDP_METHODS, default=None)
    q.set_defaults(handler=_handle_checkin)


def _server_view(args: argparse.Namespace, orders: Orders) -> dict[str, Any]:
    """Certificate against a party that sees each user's report before shuffling (an untrusted shuffler or
    collecting server): ``ShuffleAccountant(observer="server")`` (only the local randomizer protects, with
    check-in the revealed flag). None when the randomizer has delta0 > 0 (no RDP curve)."""
    from secagg_dp.accounting.shuffle.certificates import ShuffleAccountant

    view = {"observer": "server", "sees": "each user's report before shuffling; only the local randomizer protects"}
    if getattr(args, "eps0", None) is not None and args.delta0 > 0:
        return {**view, "epsilon": None, "order": None}
    acc = ShuffleAccountant(observer="server", orders=orders).compose(_event(args), args.rounds)
    cert = acc.certificate(args.delta)
    eps, order = cert.epsilon, cert.order
    return {
        **view,
        "epsilon": eps if math.isfinite(eps) else None,
        "order": int(order) if order is not None and math.isfinite(order) else None,
    }


def _event(args: argparse.Namespace) -> ShuffleRound | LDPShuffleRound:
    """The round the command describes: Gaussian (``--sigma``) or eps0-LDP (``--eps0``) randomizers, with
    ``--gamma`` the shuffled check-in rate."""
    from secagg_dp.accounting.shuffle.certificates import LDPShuffleRound, ShuffleRound

    gamma = getattr(args, "gamma", None)
    if getattr(args, "eps0", None) is not None:
        return LDPShuffleRound(args.n, args.eps0, gamma)
    return ShuffleRound(args.n, args.sigma, gamma)


#: What the per-round RDP curve is (JSON ``rdp_bound``), given what the epsilon converted from it is (``bound``).
_RDP_BOUND_OF = {"upper": "upper", RDP_LOWER: "lower", "estimate": "estimate"}


def _emit(
    args: argparse.Namespace, out: dict[str, Any], orders: Orders, rdp: Iterable[float], rdp_bound: str | None = None
) -> int:
    """Print ``out``; with ``--rdp`` add the curve and ``rdp_bound``, the label of the RDP curve itself (an RDP
    lower bound is "lower" there, while the epsilon converted from it is "rdp-lower")."""
    out = {"observer": "analyst", **out, "server": _server_view(args, orders)}
    if args.rdp:
        out["rdp"] = rdp_curve(orders, rdp)
        out["rdp_bound"] = rdp_bound
    if out["epsilon"] is not None and not math.isfinite(out["epsilon"]):
        out["order"] = None
    elif out["order"] is not None and float(out["order"]).is_integer():
        out["order"] = int(out["order"])
    if args.json:
        print(dumps(out))
    else:
        tag = "certificate" if out["certificate"] else "NOT a certificate"
        eps = out["epsilon"]
        eps_text = "inf (" + INFINITE_EPSILON + ")" if eps is None or not math.isfinite(eps) else f"{eps:.6g}"
        print(
            f"epsilon={eps_text} delta={out['delta']:g} order={out['order']} "
            f"bound={out['bound']} ({tag}) method={out['method']} neighbouring={out['neighbouring']}"
        )
        for c in out["caveats"]:
            print(f"  note: {c}")
        if "epsilon_lower" in out:
            low = out["epsilon_lower"]
            print(f"  epsilon_lower={low['epsilon']} (a proven LOWER bound on epsilon at this delta; {low['method']})")
        srv = out["server"]
        print(
            f"  observer analyst (sees the shuffled reports): epsilon={out['epsilon']}\n"
            f"  observer server (sees {srv['sees']}): epsilon={srv['epsilon']}"
        )
    return 0


def _certify(
    args: argparse.Namespace, bound: str, orders: Orders, conversion: str = "cks"
) -> tuple[float, float | None, list[str], npt.NDArray[np.float64]]:
    """(epsilon, order, caveats, per-round RDP curve) of ``--rounds`` rounds of the command's round under the
    shuffle bound ``bound`` (a key of ``SHUFFLE_BOUNDS`` or ``LDP_SHUFFLE_BOUNDS``), from the
    :class:`ShuffleAccountant`; this command labels and prints them."""
    from secagg_dp.accounting.shuffle.certificates import ShuffleAccountant

    acc = ShuffleAccountant(bound, orders=orders, conversion=conversion).compose(_event(args), args.rounds)
    cert = acc.certificate(args.delta)
    return cert.epsilon, cert.order, list(cert.detail["caveats"]), acc.round_rdp


#: --bound of shuffle-gaussian -> (key of SHUFFLE_BOUNDS, method label, caveats, certificate?, bound of the
#: epsilon, bound of the RDP curve)
_SHUFFLE_GAUSSIAN = {
    "lower": (
        "gaussian-pair",
        "shuffle-gaussian (LT22 Thm 1 / LHT22 Thm 3)",
        [_CAVEAT_LOWER],
        False,
        RDP_LOWER,
        "lower",
    ),
    "upper": ("gaussian-upper", "gaussian-no-shuffle (LT22 Corollary 1)", [], True, "upper", "upper"),
}

#: --method of shuffled-checkin --sigma -> (key of SHUFFLE_BOUNDS, bound, certificate?, caveats, method label)
_CHECKIN_GAUSSIAN = {
    "windowed": (
        "checkin-shuffle-estimate",
        "estimate",
        False,
        [_CAVEAT_WBK_ON_LOWER],
        "shuffled-checkin-gaussian windowed k/n sum (LHT22 Thm 2 + LT22 Thm 2)",
    ),
    "chernoff": (
        "checkin-chernoff",
        "estimate",
        False,
        ["rests on Conjecture 1 (LT22), unproven", "uses rate gamma in place of k/n as printed", _CAVEAT_WBK_ON_LOWER],
        "shuffled-checkin-gaussian Chernoff (LT22 Thm 3)",
    ),
    "pair-lower": (
        "checkin-pair",
        RDP_LOWER,
        False,
        [_CAVEAT_PAIR_CHECKIN],
        "shuffled-checkin-gaussian exact pair moment",
    ),
    "gaussian-upper": (
        "checkin-upper",
        "upper",
        True,
        [],
        "shuffled-checkin-gaussian windowed k/n sum, Gaussian base (LHT22 Thm 2 + LT22 Cor. 1)",
    ),
}


def _handle_gaussian(args: argparse.Namespace) -> int:
    import numpy as np

    orders = np.arange(2, args.max_order + 1)
    key, method, caveats, cert, bound, rdp_bound = _SHUFFLE_GAUSSIAN[args.bound]
    eps, order, notes, rdp = _certify(args, key, orders, args.conversion)
    out = {
        "epsilon": eps,
        "delta": args.delta,
        "order": order,
        "method": method + f"; conversion={args.conversion}",
        "neighbouring": "replace-one",
        "bound": bound,
        "certificate": cert,
        "caveats": caveats + notes,
        "epsilon_lower": _epsilon_lower(args),
    }
    return _emit(args, out, orders, rdp, rdp_bound)


def _epsilon_lower(args: argparse.Namespace) -> dict[str, Any]:
    """A proven LOWER bound on the mechanism's epsilon at ``--delta`` (the sum of one pair's shuffled reports,
    :mod:`secagg_dp.accounting.shuffle.lower`), whichever ``--bound`` is printed; never a certificate."""
    from secagg_dp.accounting.shuffle.lower import shuffle_gaussian_epsilon_lower

    eps = shuffle_gaussian_epsilon_lower(n=args.n, sigma=args.sigma, rounds=args.rounds, delta=args.delta)
    return {
        "epsilon": eps if math.isfinite(eps) else None,
        "delta": args.delta,
        "bound": "lower",
        "certificate": False,
        "method": "sum of the shuffled reports of the pair (0,...,0)/(1,0,...,0): Gaussian shift "
        "mu = sqrt(T)/(sigma sqrt(n)) (Balle & Wang 2018, Thm 8), lower bound by post-processing "
        "(Dwork & Roth 2014, Prop. 2.1)",
    }


def _handle_checkin(args: argparse.Namespace) -> int:
    import numpy as np

    from secagg_dp.errors import ParameterError

    if (args.sigma is None) == (args.eps0 is None):
        raise ParameterError("Give exactly one of '--sigma' (Gaussian) or '--eps0' (LDP randomizer).")
    orders = np.arange(2, args.max_order + 1)
    if args.sigma is not None:
        method = args.method or "windowed"
        if method not in _GAUSS_METHODS:
            raise ParameterError(f"Argument '--method' must be one of {_GAUSS_METHODS} with --sigma, not {method!r}.")
        key, bound, cert, caveats, label = _CHECKIN_GAUSSIAN[method]
        eps, order, notes, rdp = _certify(args, key, orders)
        out = {
            "epsilon": eps,
            "delta": args.delta,
            "order": order,
            "method": label,
            "neighbouring": "replace-one",
            "bound": bound,
            "certificate": cert,
            "caveats": caveats + notes,
        }
        return _emit(args, out, orders, rdp, _RDP_BOUND_OF[bound])
    return _handle_ldp(args, orders)


def _handle_ldp(args: argparse.Namespace, orders: Orders) -> int:
    """``shuffled-checkin --eps0``: the LDP approaches (estimates) and the draft's Thm 2 / Thm 3 curves."""
    from secagg_dp.accounting.shuffle import ldp as ls
    from secagg_dp.errors import ParameterError

    method = args.method or "approach1"
    if method not in _LDP_METHODS:
        raise ParameterError(f"Argument '--method' must be one of {_LDP_METHODS} with --eps0, not {method!r}.")
    if method in ("seed000-upper", "seed000-lower"):
        if args.delta0 != 0.0:
            raise ParameterError(
                f"The {_DRAFT} Theorems 2 and 3 are for pure eps0-LDP randomizers: '--delta0' must be 0, "
                f"not {args.delta0!r}."
            )
        upper = method == "seed000-upper"
        eps, order, notes, rdp = _certify(args, "ldp-draft-upper" if upper else "ldp-draft-lower", orders)
        res = ls.LDPResult(
            eps,
            args.delta,
            math.nan if order is None else order,  # None only for an empty composition (rounds >= 1 here)
            f"{_DRAFT}, Thm "
            + ("2 (read as an estimate)" if upper else "3 (RDP lower bound, binary randomized response)"),
            bound="estimate" if upper else RDP_LOWER,
            certificate=False,
        )
        caveats = [_CAVEAT_DRAFT_UPPER if upper else _CAVEAT_SEED000_LOWER]
        return _emit(args, _ldp_out(res, caveats + notes), orders, rdp, "estimate" if upper else "lower")
    kw = dict(n=args.n, gamma=args.gamma, rounds=args.rounds, delta=args.delta, max_order=args.max_order)
    if method == "first-cut":
        res = ls.first_cut_epsilon(args.eps0, args.delta0, **kw)
    else:
        res = ls.approach_epsilon(args.eps0, args.delta0, approach=int(method[-1]), **kw)
    args.rdp = False  # the LDP approaches report (epsilon, delta) only
    return _emit(args, _ldp_out(res, [_CAVEAT_LDP_DELTA]), orders, [])


def _ldp_out(res: LDPResult, caveats: list[str]) -> dict[str, Any]:
    """The JSON object of an ``LDPResult``: its own ``bound`` and ``certificate`` labels, never upgraded."""
    return {
        "epsilon": res.epsilon,
        "delta": res.delta,
        "order": res.order if math.isfinite(res.order) else None,
        "method": res.method,
        "neighbouring": "replace-one",
        "bound": res.bound,
        "certificate": res.certificate,
        "caveats": caveats,
    }
