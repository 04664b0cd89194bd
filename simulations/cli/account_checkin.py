"""``secagg-dp account checkin``: distributed check-in certificate (replace-one, C = 1)."""

from __future__ import annotations

import argparse

from simulations.cli._args import DELTA, MAX_CHECKIN_ORDER, POSITIVE, PROBABILITY, int_in, real_in

__all__ = ["register_account"]


def register_account(subparsers: argparse._SubParsersAction) -> None:
    """Register ``secagg-dp account checkin`` (flags and JSON keys of issue 5)."""
    p = subparsers.add_parser(
        "checkin",
        help="distributed check-in: n clients each check in with probability gamma (replace-one)",
        description=(
            "Certify T rounds of distributed check-in: K ~ Bin(n, gamma) clients take part, each adds noise of "
            "std S (relative to the clip norm C = 1); the k-client sum is subsampled without replacement at "
            "rate k/n (WBK19 Thm 27 for the Gaussian, Thm 9 otherwise, capped by the base RDP). Prints the "
            "seed-style mixture certificate and the window certificate side by side."
        ),
    )
    p.add_argument("--n", "--clients", dest="n", type=int_in(1), required=True,
                   help="number of clients N (alias --clients)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--gamma", type=PROBABILITY, help="effective check-in rate gamma")
    g.add_argument("--p", type=PROBABILITY, help="check-in probability p (use with --dropout)")
    p.add_argument("--dropout", type=PROBABILITY, default=None, help="dropout probability p'; gamma = p (1 - p')")
    p.add_argument("--sigma", type=POSITIVE, required=True, help="per-client noise std relative to C = 1")
    p.add_argument("--mechanism", choices=("gaussian", "ddg", "skellam"), default="gaussian",
                   help="noise: continuous Gaussian, distributed discrete Gaussian, Skellam")
    p.add_argument("--rounds", type=int_in(1), required=True, help="number of rounds T")
    p.add_argument("--delta", type=DELTA, required=True, help="target delta in (0, 1)")
    p.add_argument("--method", choices=("rdp", "window"), default="rdp",
                   help="certificate reported in JSON: full mixture (rdp) or window certificate")
    p.add_argument("--window-delta", choices=("conditioning", "coupling"), default="conditioning",
                   help="delta charged for check-in counts outside the window: T*P(out) (conditioning, default) "
                        "or (1+e^eps)*T*P(out) (coupling, the looser total-variation bound)")
    p.add_argument("--local-steps", type=int_in(1), default=None,
                   help="local DP-SGD steps per round (sample-level, add-remove, seed 004 Thm 4.7)")
    p.add_argument("--sample-rate", type=real_in(0.0, 1.0, lo_open=True), default=1.0, help="Poisson sampling rate q inside each client")
    p.add_argument("--scale", type=POSITIVE, default=256.0,
                   help="ddg/skellam: grid points per unit of C (sensitivities 2*scale, noise sigma*scale)")
    p.add_argument("--dim", type=int_in(1), default=1, help="ddg/skellam: vector dimension d")
    p.add_argument("--max-order", type=int_in(2, MAX_CHECKIN_ORDER), default=256,
                   help=f"largest integer RDP order, at most {MAX_CHECKIN_ORDER} (default 256)")
    p.add_argument("--amplification", choices=("auto", "thm9"), default="auto",
                   help="subsampling bound: auto = WBK19 Thm 27 for gaussian, Thm 9 for ddg/skellam (tightest); "
                        "thm9 = Thm 9 for every mechanism (the issue's known answer 2.204708 uses it)")
    p.add_argument("--baselines", action="store_true", help="also print the labelled seed baselines")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--rdp", action="store_true",
                   help='with --json: add the composed RDP curve {"orders": [...], "values": [...]}')
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    import math
    import warnings

    import numpy as np

    from secagg_dp.accounting.checkin.mixture import SubsampledCheckin, checkin_epsilon
    from secagg_dp.accounting.checkin.bases import DDGSum, GaussianSum, SkellamSum
    from secagg_dp.accounting.core.conversion import LargestOrderWarning
    from secagg_dp.accounting.checkin.dropout import effective_checkin_rate
    from secagg_dp.accounting.checkin.local_steps import LocalStepsDDG, LocalStepsGaussian, LocalStepsSkellam
    from secagg_dp.errors import ParameterError
    from simulations.cli._output import dumps, rdp_curve

    if args.gamma is not None:
        if args.dropout is not None:
            raise ParameterError("Argument '--dropout' goes with '--p', not with '--gamma'.")
        gamma = args.gamma
    else:
        if args.dropout is None:
            raise ParameterError("Argument '--p' needs '--dropout' (use --dropout 0 for none).")
        gamma = effective_checkin_rate(args.p, args.dropout)
    orders = np.arange(2, args.max_order + 1)
    s, d = args.scale, args.dim
    local = args.local_steps is not None
    if local:
        sens = s  # one sample, add-remove, in grid units for the discrete mechanisms
        d2, d1 = sens, sens * min(math.sqrt(d), sens)
        if args.mechanism == "gaussian":
            mech = LocalStepsGaussian(args.sigma, args.local_steps, args.sample_rate)
        elif args.mechanism == "skellam":
            mech = LocalStepsSkellam(max((args.sigma * s) ** 2, 5e-324), d2, d1, args.local_steps, args.sample_rate)
        else:
            mech = LocalStepsDDG(args.sigma * s, d, d2, d1, args.local_steps, args.sample_rate)
        prov = SubsampledCheckin(mech, args.n, amplification="joint-convexity", neighbouring="add-remove")
    else:
        if args.sample_rate != 1.0:
            raise ParameterError("Argument '--sample-rate' needs '--local-steps'.")
        d2 = 2.0 * s
        d1 = d2 * min(math.sqrt(d), d2)
        if args.mechanism == "gaussian":
            mech = GaussianSum(args.sigma)
        elif args.mechanism == "skellam":
            mech = SkellamSum(max((args.sigma * s) ** 2, 5e-324), d2, d1)  # underflow: a smaller variance, larger ε
        else:
            mech = DDGSum(args.sigma * s, d, d2, d1)
        prov = SubsampledCheckin(mech, args.n, amplification=args.amplification)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seed_style = checkin_epsilon(prov, args.n, gamma, args.rounds, args.delta, orders, method="rdp")
        try:
            window = checkin_epsilon(prov, args.n, gamma, args.rounds, args.delta, orders, method="window",
                                    delta_split=args.window_delta)
        except ParameterError:
            window = None
    chosen = seed_style if args.method == "rdp" or window is None else window
    if args.method == "window" and window is None:
        raise ParameterError("No window certificate exists for these parameters (T * P(K outside) >= delta).")
    base = {}
    if args.baselines and not local and args.mechanism == "gaussian":
        from secagg_dp.accounting.checkin.baselines import chernoff_shortcut_epsilon, strong_composition_baseline

        base = {
            "strong_composition": strong_composition_baseline(args.n, gamma, args.sigma, args.rounds, args.delta),
            "chernoff_shortcut": chernoff_shortcut_epsilon(args.n, gamma, args.sigma, args.rounds, args.delta, orders),
        }
    if args.json:
        out = chosen.as_dict()
        out.update({"gamma": gamma, "n": args.n, "mechanism": args.mechanism,
                    "unit": "sample" if local else "client",
                    "amplification": "joint-convexity" if local else args.amplification,
                    "window_delta": args.window_delta})
        out["epsilon_rdp"] = seed_style.epsilon
        out["epsilon_window"] = window.epsilon if window else None
        if window is None:
            out["epsilon_window_reason"] = "no check-in window has T * P(K outside window) < delta"
        if not math.isfinite(out["epsilon"]):
            out["order"] = None
        if args.rdp:
            out["rdp"] = rdp_curve(chosen.rdp.keys(), chosen.rdp.values())
        if base:
            out["baselines"] = {k: {"epsilon": v["epsilon"], "method": v["method"]} for k, v in base.items()}
        print(dumps(out))
        return 0
    unit = "sample-level add-remove" if local else "client-level replace-one"
    print(f"distributed check-in: n={args.n} gamma={gamma:g} sigma={args.sigma:g} ({args.mechanism}, {unit}), "
          f"T={args.rounds}, delta={args.delta:g}")
    print(f"  {'certificate':<34}{'epsilon':>12}{'order':>7}  detail")
    amp = "joint convexity" if local else {"auto": "WBK19 Thm 27" if args.mechanism == "gaussian" else "WBK19 Thm 9",
                                           "thm9": "WBK19 Thm 9"}[args.amplification]
    print(f"  {'seed-style mixture (rdp)':<34}{seed_style.epsilon:>12.6g}{seed_style.order:>7}  "
          f"rate k/n ({amp}), k=0 term kept")
    if window:
        print(f"  {'window certificate (window)':<34}{window.epsilon:>12.6g}{window.order:>7}  "
              f"K in [{window.window[0]}, {window.window[1]}], delta_window={window.delta_window:.3g}")
    else:
        print(f"  {'window certificate (window)':<34}{'n/a':>12}")
    for name, v in base.items():
        print(f"  {'baseline: ' + name:<34}{v['epsilon']:>12.6g}{'':>7}  {v['method']}")
    for w in caught:
        if issubclass(w.category, LargestOrderWarning):
            print("  note: optimal order is the largest offered; raise --max-order for a smaller epsilon")
            break
    return 0
