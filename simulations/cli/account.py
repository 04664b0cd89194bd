"""``secagg-dp account gaussian|ddg|skellam`` and ``secagg-dp calibrate gaussian|ddg|skellam``.

Heavy modules are imported inside the handlers. Every certificate printed states its neighbouring
relation and method.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from simulations.cli._args import DELTA, POSITIVE, Subparsers, int_in, real_in
from simulations.cli._output import INFINITE_EPSILON, dumps, rdp_curve

__all__ = ["register_account", "register_calibrate"]

_BETA_DEFAULT = math.exp(-0.5)
_TINY = 5e-324  # the smallest positive double


def _common(p: argparse.ArgumentParser, *, calibrate: bool) -> None:
    p.add_argument("--rounds", type=int_in(0), default=1, metavar="T", help="number of rounds composed (default 1)")
    p.add_argument("--delta", type=DELTA, default=1e-5, metavar="D", help="target delta in (0, 1) (default 1e-5)")
    p.add_argument(
        "--neighbouring",
        choices=("replace-one", "add-remove"),
        default="add-remove",
        help="neighbouring relation; the accountant sets the sensitivity (C or 2C for a clipped sum) "
        "itself (default add-remove; Poisson sampling needs add-remove, without-replacement replace-one)",
    )
    p.add_argument(
        "--sample-rate",
        type=real_in(0.0, 1.0, lo_open=True),
        default=1.0,
        metavar="q",
        help="sampling rate q (default 1: no sampling)",
    )
    p.add_argument(
        "--sampling",
        choices=("poisson", "without-replacement"),
        default="poisson",
        help="how records/clients are sampled when q < 1 (default poisson)",
    )
    p.add_argument(
        "--population",
        type=int_in(1),
        default=None,
        metavar="N",
        help="population N (sampling without replacement; q·N must be an integer)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    if calibrate:
        p.add_argument("--epsilon", type=POSITIVE, required=True, metavar="E", help="target epsilon (> 0)")
    else:
        p.add_argument(
            "--rdp",
            action="store_true",
            help='add the composed RDP curve {"orders": [...], "values": [...]} (JSON) or print it',
        )


def _codec_flags(p: argparse.ArgumentParser, *, calibrate: bool) -> None:
    p.add_argument(
        "--clients",
        "--n",
        dest="clients",
        type=int_in(1),
        required=True,
        metavar="n",
        help="clients per round n (alias --n)",
    )
    p.add_argument(
        "--dim",
        type=int_in(1),
        required=True,
        metavar="d",
        help="vector dimension (padded to a power of two as the codec pads it)",
    )
    p.add_argument(
        "--bits", type=int_in(1, 62), required=True, metavar="b", help="bits per coordinate of the modular sum"
    )
    p.add_argument("--clip", type=POSITIVE, required=True, metavar="c", help="L2 clip norm of one client's vector")
    if not calibrate:
        p.add_argument(
            "--noise-multiplier", type=POSITIVE, required=True, metavar="z", help="z: local noise std = z·c/sqrt(n)"
        )
    p.add_argument(
        "--k-stddevs", type=POSITIVE, default=4.0, metavar="k", help="k in the k-stddev scale rule (default 4)"
    )
    p.add_argument(
        "--beta",
        type=real_in(0.0, 1.0, hi_open=True),
        default=_BETA_DEFAULT,
        metavar="β",
        help="conditional-rounding beta in [0,1) (default e^-1/2)",
    )


def register_account(subparsers: Subparsers) -> None:
    """Add ``gaussian``, ``ddg`` and ``skellam`` under ``secagg-dp account``."""
    p = subparsers.add_parser(
        "gaussian",
        help="Gaussian noise on a clipped sum (sigma = z*C), optionally subsampled",
        description="RDP certificate for T rounds of a clipped sum with Gaussian noise sigma = z*C. "
        "Under replace-one the accountant uses sensitivity 2C itself: never pre-halve z.",
    )
    p.add_argument(
        "--noise-multiplier",
        "--sigma",
        dest="noise_multiplier",
        type=POSITIVE,
        required=True,
        metavar="z",
        help="sigma / C, C the clip norm of one record (alias --sigma)",
    )
    _common(p, calibrate=False)
    p.set_defaults(handler=_account_gaussian)
    for mech, helptext in (
        ("ddg", "distributed discrete Gaussian through the Z_q codec (TFF parameterisation)"),
        ("skellam", "distributed Skellam through the Z_q codec (TFF parameterisation)"),
    ):
        q = subparsers.add_parser(
            mech,
            help=helptext,
            description=helptext + ". Local sigma = z*c/sqrt(n); "
            "scale from the k-stddev rule; sensitivities of one client's clipped and "
            "rounded vector (doubled under replace-one).",
        )
        _codec_flags(q, calibrate=False)
        _common(q, calibrate=False)
        q.set_defaults(handler=_account_ddg if mech == "ddg" else _account_skellam)


def register_calibrate(subparsers: Subparsers) -> None:
    """Add ``gaussian``, ``ddg`` and ``skellam`` under ``secagg-dp calibrate``."""
    p = subparsers.add_parser(
        "gaussian",
        help="smallest noise multiplier z meeting --epsilon for the Gaussian sum",
        description=(
            "Smallest z (sigma = z*C) with epsilon <= --epsilon; bracketed bisection, clear error if unreachable."
        ),
    )
    _common(p, calibrate=True)
    p.set_defaults(handler=_calibrate_gaussian)
    for mech in ("ddg", "skellam"):
        q = subparsers.add_parser(
            mech,
            help=f"smallest noise multiplier z meeting --epsilon for {mech}",
            description=f"Smallest z (local sigma = z*c/sqrt(n)) with epsilon <= --epsilon for {mech}.",
        )
        _codec_flags(q, calibrate=True)
        _common(q, calibrate=True)
        q.set_defaults(handler=_calibrate_codec, mechanism_name=mech)


# ----------------------------------------------------------------------------------------------------


def _events_for(args: argparse.Namespace, z: float, mech: str) -> tuple[Any, dict[str, Any], str]:
    """Build the per-round event for ``mech`` at noise multiplier z; returns (event, extra JSON, method)."""
    from secagg_dp.accounting.core.events import (
        DistributedDiscreteGaussian,
        Gaussian,
        Skellam,
        sampled,
        sum_l2_sensitivity,
    )

    nb = args.neighbouring
    if mech == "gaussian":
        base: Gaussian | DistributedDiscreteGaussian | Skellam = Gaussian(
            sigma=z, l2_sensitivity=sum_l2_sensitivity(1.0, nb), neighbouring=nb
        )
        extra: dict[str, Any] = {"noise_multiplier": z, "l2_sensitivity": base.l2_sensitivity}
        method = "gaussian (Mironov 2017)"
    else:
        from secagg_dp.accounting.core.rdp import ddg_tau
        from secagg_dp.quantize import ZqCodec

        n = args.clients
        local_sigma = z * args.clip / math.sqrt(n)
        scale = ZqCodec.scale_for(
            bits=args.bits,
            n_clients=n,
            clip=args.clip,
            dim=args.dim,
            sigma=local_sigma,
            k=args.k_stddevs,
            beta=args.beta,
        )
        codec = ZqCodec(args.dim, args.bits, args.clip, scale, rotation_seed=0, beta=args.beta)
        factor = 2.0 if nb == "replace-one" else 1.0
        l2, l1 = factor * codec.l2_sensitivity, factor * codec.l1_sensitivity
        sigma_int = local_sigma * scale
        extra = {
            "noise_multiplier": z,
            "local_sigma": local_sigma,
            "scale": scale,
            "padded_dim": codec.padded_dim,
            "l2_sensitivity": l2,
            "l1_sensitivity": l1,
        }
        if mech == "ddg":
            base = DistributedDiscreteGaussian(n, sigma_int, codec.padded_dim, l2, l1, nb)
            extra["tau"] = ddg_tau(n, sigma_int)
            method = "distributed discrete Gaussian (Kairouz-Liu-Steinke 2021 Prop. 14)"
        else:
            # n·σ² may underflow to 0 for a vanishing σ; the smallest positive double is a lower bound on the
            # variance, hence an upper bound on ε (non-increasing in the variance)
            base = Skellam(max(n * sigma_int * sigma_int, _TINY), l2, l1, nb)
            extra["variance"] = base.variance
            method = "Skellam (Agarwal-Kairouz-Liu 2021)"
    ev = sampled(base, sample_rate=args.sample_rate, sampling=args.sampling, population=args.population)
    if args.sample_rate < 1.0:
        if args.sampling == "poisson":
            method += (
                " + Poisson sampling ("
                + ("Mironov-Talwar-Zhang 2019" if mech == "gaussian" else "Zhu-Wang 2019 Thm 5")
                + ")"
            )
        else:
            method += (
                " + sampling w/o replacement (Wang-Balle-Kasiviswanathan 2019 Thm "
                + ("27" if mech == "gaussian" else "9")
                + ")"
            )
    return ev, extra, method + "; RDP->DP Canonne-Kamath-Steinke 2020 Prop. 12"


def _evaluate(args: argparse.Namespace, z: float, mech: str, *, warn: bool) -> dict[str, Any]:
    import warnings

    from secagg_dp._validate import check_int
    from secagg_dp.accounting.core.conversion import LargestOrderWarning, rdp_to_dp
    from secagg_dp.accounting.core.rdp import DEFAULT_ORDERS

    rounds = check_int("rounds", args.rounds, lo=0)
    ev, extra, method = _events_for(args, z, mech)
    rdp = rounds * ev.rdp(DEFAULT_ORDERS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LargestOrderWarning)
        eps, order = rdp_to_dp(DEFAULT_ORDERS, rdp, args.delta, warn=warn)
    out: dict[str, Any] = {
        "observer": "analyst",
        "epsilon": eps,
        "delta": args.delta,
        "order": _order_value(order),
        "neighbouring": args.neighbouring,
        "method": method,
        "mechanism": mech,
        "rounds": rounds,
        "sample_rate": args.sample_rate,
        "sampling": args.sampling if args.sample_rate < 1.0 else "none",
    }
    out.update(extra)
    out["server"] = _server_view(args, ev, rounds, rdp, DEFAULT_ORDERS)
    msgs = [str(w.message) for w in caught if issubclass(w.category, LargestOrderWarning)]
    if msgs:
        out["warning"] = msgs[0]
    out["_rdp"] = rdp_curve(DEFAULT_ORDERS, rdp)
    if not math.isfinite(eps):
        out["order"] = None
    return out


def _server_view(args: argparse.Namespace, ev: Any, rounds: int, rdp: Any, orders: Any) -> dict[str, Any]:
    """The certificate against a server that sees participation: sampling is then no secret, only the
    revealed Bernoulli(q) flag remains (core ``revealed_participation_rdp``, exact for a revealed flag)."""
    from secagg_dp.accounting.core.conversion import rdp_to_dp
    from secagg_dp.accounting.core.subsampling import revealed_participation_rdp

    if args.sample_rate < 1.0:
        server_rdp = rounds * revealed_participation_rdp(ev.event.rdp(orders), args.sample_rate, orders)
        sees = "who was sampled, when the sampled units are clients (participation is visible to it)"
    else:
        server_rdp = rdp
        sees = "the same aggregate as the analyst (no sampling to hide)"
    eps, order = rdp_to_dp(orders, server_rdp, args.delta, warn=False)
    return {
        "observer": "server",
        "epsilon": eps if math.isfinite(eps) else "inf",
        "order": _order_value(order) if math.isfinite(eps) else None,
        "sees": sees,
    }


def _order_value(order: float) -> float | int | None:
    if math.isinf(order):
        return None
    return int(order) if float(order).is_integer() else order


def _emit(args: argparse.Namespace, out: dict[str, Any], *, with_rdp: bool) -> int:
    rdp = out.pop("_rdp")
    if with_rdp:
        out["rdp"] = rdp
    if "warning" in out:
        print(f"secagg-dp: warning: {out['warning']}", file=sys.stderr)
    if args.json:
        print(dumps(out))
        return 0
    lead = (
        f"noise_multiplier = {out['noise_multiplier']:.6g}\n"
        if getattr(args, "epsilon", None) is not None and "target_epsilon" in out
        else ""
    )
    eps = out["epsilon"]
    eps_text = f"{eps:.10g}" if math.isfinite(eps) else f"inf ({INFINITE_EPSILON})"
    print(
        f"{lead}epsilon = {eps_text} at delta = {out['delta']:g} "
        f"(order {'-' if out['order'] is None else out['order']}, "
        f"{out['neighbouring']}, {out['rounds']} round(s))\nmethod: {out['method']}"
    )
    srv = out["server"]
    srv_eps = srv["epsilon"]  # "inf" (a string, for JSON) when no finite bound exists
    srv_text = f"{srv_eps:.10g}" if isinstance(srv_eps, float) and math.isfinite(srv_eps) else "inf"
    srv_order = "-" if srv["order"] is None else srv["order"]
    print(
        f"observer analyst (sees the released aggregate): epsilon = {eps_text}\n"
        f"observer server (sees {srv['sees']}): epsilon = {srv_text} (order {srv_order})"
    )
    if with_rdp:
        for a, v in zip(rdp["orders"], rdp["values"], strict=True):
            print(f"  rdp[{a}] = {math.inf if v is None else v:.10g}")
    return 0


def _account(args: argparse.Namespace, mech: str) -> int:
    out = _evaluate(args, args.noise_multiplier, mech, warn=True)
    return _emit(args, out, with_rdp=args.rdp)


def _account_gaussian(args: argparse.Namespace) -> int:
    return _account(args, "gaussian")


def _account_ddg(args: argparse.Namespace) -> int:
    return _account(args, "ddg")


def _account_skellam(args: argparse.Namespace) -> int:
    return _account(args, "skellam")


def _calibrate(args: argparse.Namespace, mech: str) -> int:
    from secagg_dp.accounting.core.calibration import calibrate_noise

    z = calibrate_noise(lambda x: _evaluate(args, x, mech, warn=False)["epsilon"], args.epsilon, lo=0.1, hi=10.0)
    out = _evaluate(args, z, mech, warn=False)
    out["target_epsilon"] = args.epsilon
    return _emit(args, out, with_rdp=False)


def _calibrate_gaussian(args: argparse.Namespace) -> int:
    return _calibrate(args, "gaussian")


def _calibrate_codec(args: argparse.Namespace) -> int:
    return _calibrate(args, args.mechanism_name)
