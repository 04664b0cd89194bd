"""``secagg-dp account random-checkin`` and ``calibrate random-checkin``: random check-ins (Balle et al. 2020).

Every client takes part in an epoch of M rounds with probability gamma (after dropouts) and, if so, in B of its
rounds chosen uniformly at random; E epochs. Certificates of :mod:`secagg_dp.accounting.checkin.random_checkin`
(docs/accounting/random-checkin.md), in the JSON shape of ``account checkin``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from simulations.cli._args import DELTA, POSITIVE, Subparsers, grid_flags, int_in, participation_flags
from simulations.cli.account_checkin import _coalition_flags, _coalition_of, _gamma_of

if TYPE_CHECKING:
    from secagg_dp.accounting.checkin.coalition import Coalition
    from secagg_dp.accounting.checkin.random_checkin import RandomCheckinEpoch
    from secagg_dp.accounting.core.accountant import Certificate

__all__ = ["register_account", "register_calibrate"]

_DESCRIPTION = (
    "Random check-ins (Balle, Kairouz, McMahan, Thakkar & Thakurta 2020): each client takes part in an epoch of "
    "M rounds with probability gamma (after dropouts) and then in B of them chosen uniformly; E epochs. "
    "--noise central: the aggregate's noise has std sigma whatever the number of participants (DP-SGD, "
    "pld-accounting); --noise distributed: every participant adds its own share (gaussian, ddg, skellam), so "
    "the sum's noise grows with the participants. Observers: the analyst (sees the per-round counts and sums) "
    "and the secure-aggregation server (also sees which rounds every client chose); with --colluders C "
    "--min-sum M the coalition of an active server with C corrupt clients."
)


def _common(p: argparse.ArgumentParser) -> None:
    participation_flags(p, "probability that a client takes part in an epoch (after dropouts)")
    p.add_argument("--epoch-rounds", type=int_in(1), required=True, metavar="M", help="rounds per epoch M")
    p.add_argument("--slots", type=int_in(1), default=1, metavar="B", help="rounds a participant takes (default 1)")
    p.add_argument("--epochs", type=int_in(1), default=1, metavar="E", help="number of epochs E (default 1)")
    p.add_argument("--delta", type=DELTA, required=True, help="target delta in (0, 1)")
    p.add_argument("--noise", choices=("central", "distributed"), default="distributed", help="noise model")
    p.add_argument(
        "--mechanism",
        choices=("gaussian", "ddg", "skellam"),
        default="gaussian",
        help="distributed noise: continuous Gaussian, distributed discrete Gaussian, Skellam (central: gaussian)",
    )
    p.add_argument(
        "--neighbouring",
        choices=("add-remove", "replace-one"),
        default=None,
        help="client-level relation (default: add-remove for central noise, replace-one for distributed)",
    )
    p.add_argument("--method", choices=("pld", "rdp"), default=None, help="pld (default where supported) or rdp")
    p.add_argument(
        "--observer", choices=("analyst", "server"), default="analyst", help="whose view the top-level JSON is for"
    )
    grid_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _coalition_flags(p)


def register_account(subparsers: Subparsers) -> None:
    """Register ``secagg-dp account random-checkin``."""
    p = subparsers.add_parser(
        "random-checkin", help="random check-ins: each client picks B of an epoch's M rounds", description=_DESCRIPTION
    )
    _common(p)
    p.add_argument(
        "--sigma", type=POSITIVE, required=True, help="noise std relative to C = 1 (per client if distributed)"
    )
    p.set_defaults(handler=_handle)


def register_calibrate(subparsers: Subparsers) -> None:
    """Register ``secagg-dp calibrate random-checkin``: the smallest sigma whose certificate meets --epsilon."""
    p = subparsers.add_parser(
        "random-checkin", help="smallest sigma for random check-ins at a target epsilon", description=_DESCRIPTION
    )
    _common(p)
    p.add_argument("--epsilon", type=POSITIVE, required=True, help="target epsilon")
    p.set_defaults(handler=_handle_calibrate)


def _relation(args: argparse.Namespace) -> str:
    if args.neighbouring is not None:
        return str(args.neighbouring)
    return "add-remove" if args.noise == "central" else "replace-one"


def _event(args: argparse.Namespace, sigma: float, gamma: float) -> RandomCheckinEpoch:
    import math

    from secagg_dp.accounting.checkin.bases import DDGSum, GaussianSum, SkellamSum
    from secagg_dp.accounting.checkin.random_checkin import CentralGaussian, RandomCheckinEpoch
    from secagg_dp.errors import ParameterError

    rel = _relation(args)
    mech: Any
    if args.noise == "central":
        if args.mechanism != "gaussian":
            raise ParameterError("Argument '--mechanism' must be 'gaussian' with '--noise central'.")
        mech = CentralGaussian(sigma, rel)
    else:
        if rel != "replace-one":
            raise ParameterError("Argument '--neighbouring' must be 'replace-one' with '--noise distributed'.")
        l2 = args.scale
        l1 = l2 * min(math.sqrt(args.dim), l2)
        if args.mechanism == "gaussian":
            mech = GaussianSum(sigma)
        elif args.mechanism == "skellam":
            mech = SkellamSum((sigma * args.scale) ** 2, 2.0 * l2, 2.0 * l1)
        else:
            mech = DDGSum(sigma * args.scale, args.dim, 2.0 * l2, 2.0 * l1)
    return RandomCheckinEpoch(mech, args.n, gamma, args.epoch_rounds, args.slots, rel)


def _certify(
    args: argparse.Namespace, ev: RandomCheckinEpoch, observer: str, coalition: Coalition | None
) -> Certificate:
    """The PLD certificate where it applies (unless --method rdp), else the RDP one. Without --method, the
    analyst gets the smaller of the two: its PLD for distributed noise is the server's (post-processing), while
    its RDP curve is amplified by the epoch coin; both are certificates for the analyst."""
    from secagg_dp.accounting.checkin.mixture import checkin_orders
    from secagg_dp.accounting.checkin.random_checkin import RandomCheckinAccountant

    kw: dict[str, Any] = {"observer": observer, "coalition": coalition, "orders": checkin_orders(args.max_order)}
    if args.method != "rdp":
        acc = RandomCheckinAccountant(ev.neighbouring, method="pld", **kw)
        if acc.supports(ev):
            cert = acc.compose(ev, args.epochs).certificate(args.delta)
            if args.method is None and observer == "analyst" and cert.detail.get("route") == "revealed":
                rdp = _rdp_certificate(args, ev, kw)
                return rdp if rdp.epsilon < cert.epsilon else cert
            return cert
        if args.method == "pld":
            bad = acc.unsupported(ev)
            from secagg_dp.errors import ParameterError

            raise ParameterError(f"Argument '--method' pld does not apply here: {bad[1] if bad else ''}.")
    return _rdp_certificate(args, ev, kw)


def _rdp_certificate(args: argparse.Namespace, ev: RandomCheckinEpoch, kw: dict[str, Any]) -> Certificate:
    import warnings

    from secagg_dp.accounting.checkin.random_checkin import RandomCheckinAccountant
    from secagg_dp.accounting.core.conversion import LargestOrderWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LargestOrderWarning)
        return (
            RandomCheckinAccountant(ev.neighbouring, method="rdp", **kw)
            .compose(ev, args.epochs)
            .certificate(args.delta)
        )


def _record(cert: Certificate) -> dict[str, Any]:
    out = cert.as_dict()
    out["epsilon_lower"] = cert.detail.get("epsilon_lower")  # labelled lower bound (pld only), never a certificate
    return out


def _handle(args: argparse.Namespace) -> int:
    from simulations.cli._output import dumps

    gamma = _gamma_of(args)
    coalition = _coalition_of(args)
    ev = _event(args, args.sigma, gamma)
    analyst = _certify(args, ev, "analyst", None)
    server = _certify(args, ev, "server", None)
    coal = _certify(args, ev, "coalition", coalition) if coalition is not None else None
    if args.json:
        out = _record(analyst if args.observer == "analyst" else server)
        out["server"] = _record(server)
        if coal is not None:
            out["coalition"] = _record(coal)
        out.update(
            {
                "gamma": gamma,
                "n": args.n,
                "mechanism": args.mechanism,
                "noise": args.noise,
                "epoch_rounds": args.epoch_rounds,
                "slots": args.slots,
                "epochs": args.epochs,
                "sigma": args.sigma,
                "unit": "client",
                "dropout_stages": args.dropout_stages if args.gamma is None else None,
            }
        )
        print(dumps(out))
        return 0
    print(
        f"random check-ins: n={args.n} gamma={gamma:g} M={args.epoch_rounds} B={args.slots} E={args.epochs} "
        f"sigma={args.sigma:g} ({args.noise} {args.mechanism}, {ev.neighbouring}), delta={args.delta:g}"
    )
    print(f"  {'observer':<12}{'method':<8}{'epsilon':>12}{'epsilon_lower':>16}  (lower: labelled, not certified)")
    for name, c in (("analyst", analyst), ("server", server), ("coalition", coal)):
        if c is not None:
            low = c.detail.get("epsilon_lower")
            low_s = f"{low:>16.6g}" if low is not None else f"{'n/a':>16}"
            print(f"  {name:<12}{c.method:<8}{c.epsilon:>12.6g}{low_s}")
    return 0


def _handle_calibrate(args: argparse.Namespace) -> int:
    import math

    from secagg_dp.errors import ParameterError
    from simulations.cli._output import dumps

    gamma = _gamma_of(args)
    coalition = _coalition_of(args)
    observer = "coalition" if coalition is not None else args.observer

    def eps_at(sigma: float) -> Certificate:
        return _certify(args, _event(args, sigma, gamma), observer, coalition)

    lo, hi = 1e-3, 1.0
    while eps_at(hi).epsilon > args.epsilon:
        lo, hi = hi, hi * 4.0
        if hi > 1e6:
            raise ParameterError(f"Argument '--epsilon' {args.epsilon:g} needs sigma above 1e6: not calibrated.")
    for _ in range(40):  # geometric bisection: epsilon is non-increasing in sigma
        if hi / lo < 1.0 + 1e-4:
            break
        mid = math.sqrt(lo * hi)
        if eps_at(mid).epsilon <= args.epsilon:
            hi = mid
        else:
            lo = mid
    cert = eps_at(hi)
    out = {"sigma": hi, "target_epsilon": args.epsilon, "n": args.n, "gamma": gamma, **_record(cert)}
    if args.json:
        print(dumps(out))
        return 0
    print(
        f"random check-ins ({args.noise} {args.mechanism}, {cert.neighbouring}, {cert.observer} view): n={args.n} "
        f"gamma={gamma:g} M={args.epoch_rounds} B={args.slots} E={args.epochs} delta={args.delta:g}"
    )
    print(f"  smallest sigma = {hi:.6g}  (certified epsilon {cert.epsilon:.6g} <= {args.epsilon:g}; {cert.method})")
    return 0
