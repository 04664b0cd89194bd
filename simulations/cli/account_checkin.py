"""``secagg-dp account checkin``: distributed check-in certificate (replace-one, C = 1)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from secagg_dp.stages import PROTOCOL_DROPOUT_STAGES
from simulations.cli._args import DELTA, MAX_CHECKIN_ORDER, POSITIVE, PROBABILITY, int_in, real_in

if TYPE_CHECKING:
    import numpy as np

    from secagg_dp.accounting.checkin.coalition import Coalition
    from secagg_dp.accounting.checkin.mixture import BaseMechanism, CheckinCertificate
    from secagg_dp.accounting.checkin.pld import PLDCertificate

__all__ = ["register_account", "register_calibrate"]


def register_account(subparsers: argparse._SubParsersAction) -> None:
    """Register ``secagg-dp account checkin`` (its flags and JSON keys)."""
    p = subparsers.add_parser(
        "checkin",
        help="distributed check-in: n clients each check in with probability gamma (replace-one)",
        description=(
            "Certify T rounds of distributed check-in: K ~ Bin(n, gamma) clients take part, each adds noise of "
            "std S (relative to the clip norm C = 1); the k-client sum is subsampled without replacement at "
            "rate k/n. Gaussian: the privacy-loss-distribution certificate (pld, default; Zhu-Dong-Wang 2022 "
            "dominating pairs, Connect-the-Dots discretisation) beside the RDP ones; all mechanisms: the mixture "
            "certificate (the Rényi divergence of the Zhu-Dong-Wang dominating pair for the Gaussian, WBK19 Thm 9 "
            "otherwise, capped by the base RDP) and the window "
            "certificate. Two observers: the analyst (sees K and the aggregate; amplified by check-in) and the "
            "secure-aggregation server (also sees who took part and who dropped; no secrecy of participation), "
            "one line each; with --colluders C --min-sum M a third, the coalition of an active server with C "
            "corrupt clients that may exclude honest clients down to sums of M clients."
        ),
    )
    p.add_argument(
        "--n", "--clients", dest="n", type=int_in(1), required=True, help="number of clients N (alias --clients)"
    )
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--gamma", type=PROBABILITY, help="effective check-in rate gamma")
    g.add_argument("--p", type=PROBABILITY, help="check-in probability p (use with --dropout)")
    p.add_argument(
        "--dropout",
        type=PROBABILITY,
        default=None,
        help="dropout probability p' per stage; gamma = p (1 - p')^N with N = --dropout-stages",
    )
    p.add_argument(
        "--dropout-stages",
        type=int_in(1),
        default=PROTOCOL_DROPOUT_STAGES,
        metavar="N",
        help="dropout chances before the masked input is received: 3 (default) = our protocol "
        "(advertise_keys, share_keys, masked_input), gamma = p (1 - p')^3; 1 = the single-dropout "
        "model gamma = p (1 - p') of the self check-in draft",
    )
    p.add_argument("--sigma", type=POSITIVE, required=True, help="per-client noise std relative to C = 1")
    p.add_argument(
        "--mechanism",
        choices=("gaussian", "ddg", "skellam"),
        default="gaussian",
        help="noise: continuous Gaussian, distributed discrete Gaussian, Skellam",
    )
    p.add_argument("--rounds", type=int_in(1), required=True, help="number of rounds T")
    p.add_argument("--delta", type=DELTA, required=True, help="target delta in (0, 1)")
    p.add_argument(
        "--method",
        choices=("pld", "rdp", "window"),
        default=None,
        help="certificate reported in JSON: privacy loss distribution (pld; default for the Gaussian "
        "without local steps, unless --rdp asks for an RDP curve), full mixture (rdp, the default "
        "otherwise) or window certificate",
    )
    p.add_argument(
        "--observer",
        choices=("analyst", "server"),
        default="analyst",
        help="whose view the top-level JSON certificate is for: the analyst (sees K and the aggregate) "
        "or the server (also sees who took part); both are printed, and JSON has 'server' too",
    )
    _coalition_flags(p)
    p.add_argument(
        "--window-delta",
        choices=("conditioning", "coupling"),
        default="conditioning",
        help="delta charged for check-in counts outside the window: T*P(out) (conditioning, default) "
        "or (1+e^eps)*T*P(out) (coupling, the looser total-variation bound)",
    )
    p.add_argument(
        "--local-steps",
        type=int_in(1),
        default=None,
        help="local DP-SGD steps per round, sample-level (add-remove): S = 1 uses the k clients' joint "
        "noise, S >= 2 only the client's own per-step noise (sound under adaptive local steps); "
        "the joint-noise bound of Heikkilä 2024 is printed as a comparison, not a certificate. "
        "Client-level DP-FedAvg (clip the whole update, noise once) is the command without this flag",
    )
    p.add_argument(
        "--sample-rate",
        type=real_in(0.0, 1.0, lo_open=True),
        default=1.0,
        help="Poisson sampling rate q inside each client",
    )
    p.add_argument(
        "--scale",
        type=POSITIVE,
        default=256.0,
        help="ddg/skellam: grid points per unit of C (sensitivities 2*scale, noise sigma*scale)",
    )
    p.add_argument("--dim", type=int_in(1), default=1, help="ddg/skellam: vector dimension d")
    p.add_argument(
        "--max-order",
        type=int_in(2, MAX_CHECKIN_ORDER),
        default=MAX_CHECKIN_ORDER,
        help=f"largest integer RDP order, at most {MAX_CHECKIN_ORDER} (default {MAX_CHECKIN_ORDER}); "
        "orders are every integer up to 256, then every 16th",
    )
    p.add_argument(
        "--amplification",
        choices=("auto", "pair", "thm27", "thm9"),
        default="auto",
        help="subsampling bound: auto = pair for gaussian, thm9 for ddg/skellam (tightest); pair = "
        "Rényi divergence of the Zhu-Dong-Wang 2022 dominating pair (gaussian only); thm27 = WBK19 "
        "Thm 27 (gaussian only); thm9 = WBK19 Thm 9 for every mechanism",
    )
    p.add_argument(
        "--baselines",
        action="store_true",
        help="also print the labelled baselines (strong composition, Chernoff shortcut)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--rdp", action="store_true", help='with --json: add the composed RDP curve {"orders": [...], "values": [...]}'
    )
    p.set_defaults(handler=_handle)


def _coalition_flags(p: argparse.ArgumentParser) -> None:
    """``--colluders C`` and ``--min-sum M``: the coalition observer (docs/accounting/observers.md)."""
    p.add_argument(
        "--colluders",
        type=int_in(0),
        default=None,
        metavar="C",
        help="corrupt clients colluding with an active secure-aggregation server (needs --min-sum): adds the "
        "coalition certificate, which subtracts their inputs and noise",
    )
    p.add_argument(
        "--min-sum",
        type=int_in(1),
        default=None,
        metavar="M",
        help="smallest number of clients in a sum the protocol lets finish (its threshold t; at most --n); "
        "required with --colluders",
    )


def _coalition_of(args: argparse.Namespace) -> Coalition | None:
    """The :class:`Coalition` of ``--colluders``/``--min-sum`` (None without them); bad combinations refused."""
    from secagg_dp.errors import ParameterError

    if args.colluders is None:
        if args.min_sum is not None:
            raise ParameterError("Argument '--min-sum' goes with '--colluders' (use --colluders 0 for none).")
        return None
    if args.min_sum is None:
        raise ParameterError(
            "Argument '--colluders' needs '--min-sum' M, the smallest sum the protocol lets finish (its threshold t)."
        )
    if args.min_sum > args.n:
        raise ParameterError(f"Argument '--min-sum' must be at most --n = {args.n}, not {args.min_sum}.")
    from secagg_dp.accounting.checkin.coalition import Coalition

    return Coalition(args.colluders, args.min_sum)


def _coalition_certificate(
    args: argparse.Namespace,
    coalition: Coalition,
    mech: BaseMechanism,
    gamma: float,
    orders: np.ndarray,
    neighbouring: str,
    pld: bool,
) -> CheckinCertificate | PLDCertificate:
    """The coalition's certificate, with the method of the server's: pld when the server's is pld (falling back
    to rdp outside the PLD grid's range, as the default does), else the full mixture (rdp)."""
    from secagg_dp.errors import ParameterError

    if pld:
        from secagg_dp.accounting.checkin.pld import checkin_pld

        try:
            return checkin_pld(
                args.n, gamma, args.sigma, args.rounds, args.delta, observer="coalition", coalition=coalition
            )
        except ParameterError:
            pass
    from secagg_dp.accounting.checkin.coalition import coalition_certificate

    return coalition_certificate(
        mech, args.n, gamma, args.rounds, args.delta, coalition, orders, neighbouring=neighbouring
    )


def _print_coalition(cert: CheckinCertificate | PLDCertificate) -> None:
    order = getattr(cert, "order", None)
    print(
        f"  {'observer coalition (' + cert.method + ')':<34}{cert.epsilon:>12.6g}{order or '':>7}  "
        f"server + {cert.colluders} colluding clients, sums of >= {cert.min_sum} clients"
    )


def _handle(args: argparse.Namespace) -> int:
    import math
    import warnings

    import numpy as np

    from secagg_dp.accounting.checkin.dropout import effective_checkin_rate
    from secagg_dp.accounting.checkin.local_steps import SEED004_LABEL, seed004_joint_noise_rdp
    from secagg_dp.accounting.checkin.mixture import checkin_epsilon, checkin_orders, rdp_to_epsilon
    from secagg_dp.accounting.checkin.observers import server_certificate, server_ex_post_certificate
    from secagg_dp.accounting.checkin.providers import checkin_provider
    from secagg_dp.accounting.core.conversion import LargestOrderWarning
    from secagg_dp.errors import ParameterError
    from simulations.cli._output import dumps, rdp_curve

    if args.gamma is not None:
        if args.dropout is not None:
            raise ParameterError("Argument '--dropout' goes with '--p', not with '--gamma'.")
        gamma = args.gamma
    else:
        if args.dropout is None:
            raise ParameterError("Argument '--p' needs '--dropout' (use --dropout 0 for none).")
        gamma = effective_checkin_rate(args.p, args.dropout, args.dropout_stages)
    coalition = _coalition_of(args)
    orders = checkin_orders(args.max_order)
    local = args.local_steps is not None
    if not local and args.sample_rate != 1.0:
        raise ParameterError("Argument '--sample-rate' needs '--local-steps'.")
    # one client's (or, with local steps, one sample's) vector has L2 norm <= C = 1: `scale` grid points for the
    # discrete mechanisms; the Gaussian is scale-free (only sigma / C matters)
    s = 1.0 if args.mechanism == "gaussian" else args.scale
    prov = checkin_provider(
        args.mechanism,
        args.n,
        sigma=args.sigma * s,
        l2_sensitivity=s,
        dim=args.dim,
        local_steps=args.local_steps,
        sample_rate=args.sample_rate,
        amplification=args.amplification,
    )
    mech = prov.mechanism
    pld_ok = not local and args.mechanism == "gaussian"
    method = args.method or ("pld" if pld_ok and not args.rdp else "rdp")
    if method == "pld" and not pld_ok:
        raise ParameterError(
            f"Argument '--method' = 'pld' needs '--mechanism gaussian' without '--local-steps', not "
            f"{args.mechanism!r}{' with local steps' if local else ''}. To fix, use '--method rdp' or 'window'."
        )
    if method == "pld" and args.rdp:
        raise ParameterError("Argument '--rdp' needs '--method rdp' or 'window' (pld has no RDP curve).")
    pld = pld_server = pld_note = None
    pool = pld_job = None
    if method == "pld":
        from secagg_dp._parallel import idle_cpus
        from secagg_dp.accounting.checkin.pld import checkin_pld

        def pld_pair() -> tuple[PLDCertificate, PLDCertificate]:
            return (
                checkin_pld(args.n, gamma, args.sigma, args.rounds, args.delta, observer="analyst"),
                checkin_pld(args.n, gamma, args.sigma, args.rounds, args.delta, observer="server"),
            )

        if idle_cpus(2) >= 2:
            # the PLD certificates and the RDP lines below share no state: with an idle CPU the PLD pair runs
            # on a worker thread while this thread computes the RDP lines (numpy's kernels release the GIL);
            # the numbers are the same as one after the other
            from concurrent.futures import ThreadPoolExecutor

            pool = ThreadPoolExecutor(max_workers=1)
            pld_job = pool.submit(pld_pair)
        else:
            try:
                pld, pld_server = pld_pair()
            except ParameterError as exc:  # outside the PLD grid's range: the default falls back to RDP
                if args.method == "pld":
                    raise
                method, pld, pld_server, pld_note = "rdp", None, None, f"pld unavailable, rdp used: {exc}"
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            seed_style = checkin_epsilon(prov, args.n, gamma, args.rounds, args.delta, orders, method="rdp")
            try:
                window = checkin_epsilon(
                    prov,
                    args.n,
                    gamma,
                    args.rounds,
                    args.delta,
                    orders,
                    method="window",
                    delta_split=args.window_delta,
                )
            except ParameterError:
                window = None
            nb = prov.neighbouring
            server = server_certificate(mech, args.n, gamma, args.rounds, args.delta, orders, neighbouring=nb)
            ex_post = server_ex_post_certificate(mech, args.n, gamma, args.rounds, args.delta, orders, neighbouring=nb)
    except BaseException:
        if pld_job is not None:  # as before the overlap: an explicit --method pld reports its own error first
            pld_error = pld_job.exception()
            if args.method == "pld" and isinstance(pld_error, ParameterError):
                raise pld_error from None
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=True)  # an exception above still waits for the worker (no stray thread)
    if pld_job is not None:
        try:
            pld, pld_server = pld_job.result()
        except ParameterError as exc:  # outside the PLD grid's range: the default falls back to RDP
            if args.method == "pld":
                raise
            method, pld, pld_server, pld_note = "rdp", None, None, f"pld unavailable, rdp used: {exc}"
    coal = None if coalition is None else _coalition_certificate(args, coalition, mech, gamma, orders, nb, bool(pld))
    comparison = None
    if local and args.local_steps >= 2 and args.mechanism == "gaussian":
        from secagg_dp.accounting.checkin.mixture import PerKTable, checkin_rdp

        ks = np.arange(args.n + 1, dtype=np.float64)
        old = seed004_joint_noise_rdp(args.sigma, args.local_steps, args.sample_rate, np.maximum(ks, 1.0), orders)
        old_prov = PerKTable(np.vstack([np.zeros((1, orders.size)), old[1:]]), orders, neighbouring="add-remove")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old_rdp = args.rounds * checkin_rdp(_JointConvexityTable(old_prov, args.n), args.n, gamma, orders)
            old_eps = rdp_to_epsilon(orders=orders, rdp=old_rdp, delta=args.delta)[0]
        comparison = {
            "bound": SEED004_LABEL,
            "certificate": False,
            "epsilon": old_eps,
            "method": "Heikkilä 2024 Thm 4.7 joint noise over S local steps, check-in by joint convexity",
        }
    chosen = seed_style if method == "rdp" or window is None else window
    if method == "window" and window is None:
        raise ParameterError("No window certificate exists for these parameters (T * P(K outside) >= delta).")
    base = {}
    if args.baselines and not local and args.mechanism == "gaussian":
        from secagg_dp.accounting.checkin.baselines import chernoff_shortcut_epsilon, strong_composition_baseline

        base = {
            "strong_composition": strong_composition_baseline(args.n, gamma, args.sigma, args.rounds, args.delta),
            "chernoff_shortcut": chernoff_shortcut_epsilon(args.n, gamma, args.sigma, args.rounds, args.delta, orders),
        }
    if args.json:
        analyst_cert = pld or chosen
        server_cert = pld_server or server
        out = (analyst_cert if args.observer == "analyst" else server_cert).as_dict()
        out["bound"] = "own noise per local step" if local and args.local_steps >= 2 else "joint noise"
        out["server"] = server_cert.as_dict()
        out["server_ex_post"] = ex_post.as_dict()
        if coal is not None:
            out["coalition"] = coal.as_dict()
        out["dropout_stages"] = args.dropout_stages if args.gamma is None else None
        if comparison:
            out["comparison"] = comparison
        out.update(
            {
                "gamma": gamma,
                "n": args.n,
                "mechanism": args.mechanism,
                "unit": "sample" if local else "client",
                "amplification": "joint-convexity" if local else args.amplification,
                "window_delta": args.window_delta,
            }
        )
        analyst = args.observer == "analyst"  # the rdp/window paths here certify the analyst view only
        out["epsilon_rdp"] = seed_style.epsilon if analyst else None
        out["epsilon_window"] = window.epsilon if window and analyst else None
        if analyst and window is None:
            out["epsilon_window_reason"] = "no check-in window has T * P(K outside window) < delta"
        if pld:
            out["epsilon_pld"] = pld.epsilon
        if pld_note:
            out["method_note"] = pld_note
        if not math.isfinite(out["epsilon"]):
            out["order"] = None
        if args.rdp:
            out["rdp"] = rdp_curve(chosen.rdp.keys(), chosen.rdp.values())
        if base:
            out["baselines"] = {k: {"epsilon": v["epsilon"], "method": v["method"]} for k, v in base.items()}
        print(dumps(out))
        return 0
    unit = "sample-level add-remove" if local else "client-level replace-one"
    print(
        f"distributed check-in: n={args.n} gamma={gamma:g} sigma={args.sigma:g} ({args.mechanism}, {unit}), "
        f"T={args.rounds}, delta={args.delta:g}"
    )
    print(f"  {'certificate':<34}{'epsilon':>12}{'order':>7}  detail")
    print("  (the rdp, pld and window lines certify the analyst view; the observer lines below say who)")
    amp = (
        "joint convexity"
        if local
        else {
            "auto": "ZDW22 dominating pair" if args.mechanism == "gaussian" else "WBK19 Thm 9",
            "pair": "ZDW22 dominating pair",
            "thm27": "WBK19 Thm 27",
            "thm9": "WBK19 Thm 9",
        }[args.amplification]
    )
    print(
        f"  {'full mixture (rdp)':<34}{seed_style.epsilon:>12.6g}{seed_style.order:>7}  rate k/n ({amp}), k=0 term kept"
    )
    if pld_note:
        print(f"  note: {pld_note}")
    if pld:
        print(
            f"  {'privacy loss distribution (pld)':<34}{pld.epsilon:>12.6g}{'':>7}  analyst view, "
            f"optimistic {pld.epsilon_optimistic:.6g}, delta_tail={pld.delta_tail:.3g}"
        )
    if window:
        print(
            f"  {'window certificate (window)':<34}{window.epsilon:>12.6g}{window.order:>7}  "
            f"K in [{window.window[0]}, {window.window[1]}], "  # type: ignore[index]  # set by method="window"
            f"delta_window={window.delta_window:.3g}"
        )
    else:
        print(f"  {'window certificate (window)':<34}{'n/a':>12}")
    for name, v in base.items():
        print(f"  {'baseline: ' + name:<34}{v['epsilon']:>12.6g}{'':>7}  {v['method']}")
    a_cert, s_cert = pld or chosen, pld_server or server
    a_order = "" if pld else a_cert.order  # type: ignore[union-attr]  # a PLD certificate (no order) only when pld
    s_order = "" if pld_server else s_cert.order  # type: ignore[union-attr]  # likewise for pld_server
    print(
        f"  {'observer analyst (' + a_cert.method + ')':<34}{a_cert.epsilon:>12.6g}{a_order:>7}  "
        "sees K and the aggregate"
    )
    print(
        f"  {'observer server (' + s_cert.method + ')':<34}{s_cert.epsilon:>12.6g}{s_order:>7}  "
        "also sees who took part and who dropped"
    )
    if coal is not None:
        _print_coalition(coal)
    print(
        f"  {'server, ex-post (took part in all)':<34}{ex_post.epsilon:>12.6g}{ex_post.order:>7}  "
        "ex-post: for a client seen in every round"
    )
    if comparison:
        print(
            f"  {'comparison: ' + SEED004_LABEL:<34}{comparison['epsilon']:>12.6g}{'':>7}  "
            "certificate: false (adaptive local steps beat it)"
        )
    for w in caught:
        if issubclass(w.category, LargestOrderWarning):
            print("  note: optimal order is the largest offered; raise --max-order for a smaller epsilon")
            break
    return 0


class _JointConvexityTable:
    """Per-k table amplified by joint convexity at rate k/n (for the labelled joint-noise comparison)."""

    def __init__(self, table, n: int) -> None:  # noqa: ANN001
        self.table, self.n, self.neighbouring = table, n, table.neighbouring

    def log_expm1_upper(self, k_lo, k_hi, orders):  # noqa: ANN001, ANN201
        import numpy as np

        with np.errstate(divide="ignore"):
            return np.log(np.asarray(k_hi, dtype=np.float64) / self.n)[:, None] + self.table.log_expm1_upper(
                k_lo, k_hi, orders
            )


def register_calibrate(subparsers: argparse._SubParsersAction) -> None:
    """Register ``secagg-dp calibrate checkin``: smallest per-client sigma meeting --epsilon (Gaussian, pld)."""
    p = subparsers.add_parser(
        "checkin",
        help="distributed check-in: smallest per-client sigma meeting --epsilon (privacy loss distribution)",
        description="Smallest per-client noise std sigma (C = 1, replace-one) whose PLD certificate of T rounds "
        "of Gaussian distributed check-in is <= --epsilon; bracketed bisection to 0.1%, rounded up.",
    )
    p.add_argument("--n", type=int_in(1), required=True, help="number of clients N")
    p.add_argument("--gamma", type=PROBABILITY, required=True, help="effective check-in rate gamma")
    p.add_argument("--rounds", type=int_in(1), required=True, help="number of rounds T")
    p.add_argument("--delta", type=DELTA, required=True, help="target delta in (0, 1)")
    p.add_argument("--epsilon", type=POSITIVE, required=True, help="target epsilon")
    p.add_argument("--method", choices=("pld",), default="pld", help="accountant (pld, the tightest certified)")
    p.add_argument(
        "--observer",
        choices=("analyst", "server", "coalition"),
        default="analyst",
        help="who is observed: the analyst, the secure-aggregation server, or the coalition of an active server "
        "with --colluders corrupt clients (needs --colluders and --min-sum)",
    )
    _coalition_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_handle_calibrate)


def _calibration_coalition(args: argparse.Namespace) -> Coalition | None:
    """``--colluders``/``--min-sum`` for ``--observer coalition`` (required there, refused elsewhere)."""
    from secagg_dp.errors import ParameterError

    coalition = _coalition_of(args)
    if args.observer == "coalition" and coalition is None:
        raise ParameterError("Argument '--observer' = 'coalition' needs '--colluders' C and '--min-sum' M.")
    if args.observer != "coalition" and coalition is not None:
        raise ParameterError(f"Argument '--colluders' needs '--observer coalition', not '--observer {args.observer}'.")
    return coalition


def _handle_calibrate(args: argparse.Namespace) -> int:
    import sys
    import time

    from secagg_dp.accounting.checkin.pld import calibrate_checkin_pld
    from simulations.cli._output import dumps

    coalition = _calibration_coalition(args)
    start = time.perf_counter()

    def progress(stage: str, step: int, sigma: float, epsilon: float) -> None:
        # on stderr once the search has taken a second, so quick calibrations stay quiet
        elapsed = time.perf_counter() - start
        if elapsed > 1.0:
            print(
                f"calibrate checkin: {stage} {step}: sigma={sigma:.6g} epsilon={epsilon:.6g} ({elapsed:.1f} s)",
                file=sys.stderr,
                flush=True,
            )

    sigma, cert = calibrate_checkin_pld(
        args.n,
        args.gamma,
        args.rounds,
        args.delta,
        args.epsilon,
        observer=args.observer,
        progress=progress,
        coalition=coalition,
    )
    out = {"sigma": sigma, "target_epsilon": args.epsilon, "n": args.n, "gamma": args.gamma, **cert.as_dict()}
    if args.json:
        print(dumps(out))
        return 0
    print(
        f"distributed check-in (gaussian, client-level replace-one, {cert.observer} view): n={args.n} "
        f"gamma={args.gamma:g} T={args.rounds} delta={args.delta:g}"
    )
    print(
        f"  smallest sigma = {sigma:.6g}  (certified epsilon {cert.epsilon:.6g} <= {args.epsilon:g}; "
        f"method {cert.method}, optimistic {cert.epsilon_optimistic:.6g})"
    )
    return 0
