"""``secagg-dp account checkin``: distributed check-in certificate (replace-one, C = 1)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from simulations.cli._args import (
    DELTA,
    POSITIVE,
    PROBABILITY,
    Subparsers,
    grid_flags,
    int_in,
    participation_flags,
    real_in,
)

if TYPE_CHECKING:
    import numpy as np

    from secagg_dp.accounting.checkin.coalition import Coalition
    from secagg_dp.accounting.checkin.mixture import BaseMechanism, CheckinCertificate, PerKProvider, SubsampledCheckin
    from secagg_dp.accounting.checkin.pld import PLDCertificate
    from secagg_dp.accounting.core.accountant import Certificate

__all__ = ["register_account", "register_calibrate"]


def register_account(subparsers: Subparsers) -> None:
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
    participation_flags(p, "effective check-in rate gamma")
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
    _bound_flags(p)
    p.set_defaults(handler=_handle)


def _bound_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``account checkin`` that choose the bounds and the output (window delta, local steps,
    discrete grid, orders, amplification, baselines, JSON)."""
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
    grid_flags(p)
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


@dataclass
class _Query:
    """The command's event and what each accountant certified for it (filled by :func:`_certify`)."""

    args: argparse.Namespace
    gamma: float
    coalition: Coalition | None
    orders: np.ndarray
    local: bool
    provider: SubsampledCheckin
    method: str
    pld: PLDCertificate | None = None
    pld_server: PLDCertificate | None = None
    pld_note: str | None = None
    coal: CheckinCertificate | PLDCertificate | None = None
    comparison: dict[str, Any] | None = None
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Lines:
    """The RDP-path certificates: the analyst's full mixture and window, the server's, its ex-post bound."""

    rdp: CheckinCertificate
    window: CheckinCertificate | None
    server: CheckinCertificate
    ex_post: Certificate
    largest_order: bool  # some optimum is the largest order offered (a note)


def _gamma_of(args: argparse.Namespace) -> float:
    """gamma from ``--gamma``, or p (1 - p')^N from ``--p``, ``--dropout`` and ``--dropout-stages``."""
    from secagg_dp.accounting.checkin.dropout import effective_checkin_rate
    from secagg_dp.errors import ParameterError

    if args.gamma is not None:
        if args.dropout is not None:
            raise ParameterError("Argument '--dropout' goes with '--p', not with '--gamma'.")
        return float(args.gamma)
    if args.dropout is None:
        raise ParameterError("Argument '--p' needs '--dropout' (use --dropout 0 for none).")
    return effective_checkin_rate(args.p, args.dropout, args.dropout_stages)


def _query(args: argparse.Namespace) -> _Query:
    """The event of the command (provider, gamma, orders) and the reported method, flags checked first."""
    from secagg_dp.accounting.checkin.mixture import checkin_orders
    from secagg_dp.accounting.checkin.providers import checkin_provider
    from secagg_dp.errors import ParameterError

    gamma = _gamma_of(args)
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
    pld_ok = not local and args.mechanism == "gaussian"
    method = args.method or ("pld" if pld_ok and not args.rdp else "rdp")
    if method == "pld" and not pld_ok:
        raise ParameterError(
            f"Argument '--method' = 'pld' needs '--mechanism gaussian' without '--local-steps', not "
            f"{args.mechanism!r}{' with local steps' if local else ''}. To fix, use '--method rdp' or 'window'."
        )
    if method == "pld" and args.rdp:
        raise ParameterError("Argument '--rdp' needs '--method rdp' or 'window' (pld has no RDP curve).")
    return _Query(args, gamma, coalition, orders, local, prov, method)


def _pld_pair(q: _Query) -> tuple[PLDCertificate, PLDCertificate]:
    """The PLD certificates of the analyst and the server (Gaussian, no local steps)."""
    from secagg_dp.accounting.checkin.pld import checkin_pld

    a = q.args
    return (
        checkin_pld(a.n, q.gamma, a.sigma, a.rounds, a.delta, observer="analyst"),
        checkin_pld(a.n, q.gamma, a.sigma, a.rounds, a.delta, observer="server"),
    )


def _take_pld(q: _Query, get: Callable[[], tuple[PLDCertificate, PLDCertificate]]) -> None:
    """Store the PLD pair, or fall back to rdp outside the PLD grid's range (unless --method pld asked)."""
    from secagg_dp.errors import ParameterError

    try:
        q.pld, q.pld_server = get()
    except ParameterError as exc:
        if q.args.method == "pld":
            raise
        q.method, q.pld, q.pld_server, q.pld_note = "rdp", None, None, f"pld unavailable, rdp used: {exc}"


def _rdp_lines(q: _Query) -> _Lines:
    """The RDP certificates: the full mixture, the window, the server and the server's ex-post bound."""
    import math
    import warnings

    import numpy as np

    from secagg_dp.accounting.checkin.accountant import CheckinAccountant
    from secagg_dp.accounting.checkin.events import CheckinRound
    from secagg_dp.accounting.checkin.mixture import checkin_epsilon
    from secagg_dp.accounting.checkin.observers import server_certificate
    from secagg_dp.accounting.core.conversion import LargestOrderWarning
    from secagg_dp.errors import ParameterError

    a, prov, nb = q.args, q.provider, q.provider.neighbouring
    # recorded: the largest-order warning (a note below); numpy's floating-point warnings of the log-space tail
    # bounds (log 0 = -inf is their intended value) are not printed, as before; any other warning is
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always", LargestOrderWarning)
        rdp = checkin_epsilon(prov, a.n, q.gamma, a.rounds, a.delta, q.orders, method="rdp")
        window: CheckinCertificate | None
        try:
            window = checkin_epsilon(
                prov, a.n, q.gamma, a.rounds, a.delta, q.orders, method="window", delta_split=a.window_delta
            )
        except ParameterError:
            window = None
        server = server_certificate(prov.mechanism, a.n, q.gamma, a.rounds, a.delta, q.orders, neighbouring=nb)
        ex_post = CheckinAccountant(neighbouring=nb, orders=q.orders, observer="server", ex_post=True)
        post = ex_post.compose(CheckinRound(prov, a.n, q.gamma, None, nb), a.rounds).certificate(a.delta)
    # the ex-post accountant reports through its certificate what rdp_to_dp warns of (a finite, positive optimum
    # at the largest of several orders)
    e = post.epsilon
    at_largest = bool(post.detail["optimal_order_is_largest"]) and q.orders.size > 1 and 0.0 < e < math.inf
    return _Lines(rdp, window, server, post, bool(caught) or at_largest)


def _certify(q: _Query) -> _Lines:
    """Ask each accountant: the PLD pair (on a worker thread when a CPU is idle) beside the RDP lines."""
    from secagg_dp.errors import ParameterError

    if q.method != "pld":
        return _rdp_lines(q)
    from secagg_dp._parallel import idle_cpus

    if idle_cpus(2) < 2:
        _take_pld(q, lambda: _pld_pair(q))
        return _rdp_lines(q)
    # the PLD certificates and the RDP lines share no state: with an idle CPU the PLD pair runs on a worker
    # thread while this thread computes the RDP lines (numpy's kernels release the GIL); same numbers
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:  # an exception below still waits for the worker
        job = pool.submit(_pld_pair, q)
        try:
            lines = _rdp_lines(q)
        except BaseException:
            pld_error = job.exception()  # an explicit --method pld reports its own error first
            if q.args.method == "pld" and isinstance(pld_error, ParameterError):
                raise pld_error from None
            raise
    _take_pld(q, job.result)
    return lines


def _comparison(q: _Query) -> dict[str, Any] | None:
    """The labelled joint-noise comparison of Heikkilä 2024 (S >= 2 Gaussian local steps; not a certificate)."""
    a = q.args
    if not (q.local and a.local_steps >= 2 and a.mechanism == "gaussian"):
        return None
    import warnings

    import numpy as np

    from secagg_dp.accounting.checkin.local_steps import SEED004_LABEL, seed004_joint_noise_rdp
    from secagg_dp.accounting.checkin.mixture import PerKTable, checkin_rdp, rdp_to_epsilon
    from secagg_dp.accounting.core.conversion import LargestOrderWarning

    o = q.orders
    ks = np.arange(a.n + 1, dtype=np.float64)
    old = seed004_joint_noise_rdp(a.sigma, a.local_steps, a.sample_rate, np.maximum(ks, 1.0), o)
    old_prov = PerKTable(np.vstack([np.zeros((1, o.size)), old[1:]]), o, neighbouring="add-remove")
    # the joint-noise bound's table divides by k (infinite at k = 0, a term the mixture weights by 0): numpy's
    # divide-by-zero and the largest-order warning are expected here, nothing else is silenced
    with warnings.catch_warnings(), np.errstate(divide="ignore"):
        warnings.simplefilter("ignore", LargestOrderWarning)
        old_rdp = a.rounds * checkin_rdp(_JointConvexityTable(old_prov, a.n), a.n, q.gamma, o)
        old_eps = rdp_to_epsilon(orders=o, rdp=old_rdp, delta=a.delta)[0]
    return {
        "bound": SEED004_LABEL,
        "certificate": False,
        "epsilon": old_eps,
        "method": "Heikkilä 2024 Thm 4.7 joint noise over S local steps, check-in by joint convexity",
    }


def _baselines(q: _Query) -> dict[str, dict[str, Any]]:
    """The labelled baselines of ``--baselines`` (Gaussian, no local steps)."""
    a = q.args
    if not (a.baselines and not q.local and a.mechanism == "gaussian"):
        return {}
    from secagg_dp.accounting.checkin.baselines import chernoff_shortcut_epsilon, strong_composition_baseline

    return {
        "strong_composition": strong_composition_baseline(a.n, q.gamma, a.sigma, a.rounds, a.delta),
        "chernoff_shortcut": chernoff_shortcut_epsilon(a.n, q.gamma, a.sigma, a.rounds, a.delta, q.orders),
    }


def _handle(args: argparse.Namespace) -> int:
    """Build the event, ask each accountant, print the certificates."""
    from secagg_dp.errors import ParameterError

    q = _query(args)
    lines = _certify(q)
    if q.coalition is not None:
        nb = q.provider.neighbouring
        q.coal = _coalition_certificate(args, q.coalition, q.provider.mechanism, q.gamma, q.orders, nb, bool(q.pld))
    q.comparison = _comparison(q)
    if q.method == "window" and lines.window is None:
        raise ParameterError("No window certificate exists for these parameters (T * P(K outside) >= delta).")
    q.baselines = _baselines(q)
    if args.json:
        print(_json_text(q, lines))
    else:
        _print_text(q, lines)
    return 0


def _chosen(q: _Query, lines: _Lines) -> CheckinCertificate:
    """The RDP-path certificate the command reports: the window one for --method window, else the mixture."""
    return lines.rdp if q.method == "rdp" or lines.window is None else lines.window


def _json_text(q: _Query, lines: _Lines) -> str:
    """The one JSON object of ``--json`` (docs/cli-output.md)."""
    import math

    from simulations.cli._output import dumps, rdp_curve

    a, local, window, chosen = q.args, q.local, lines.window, _chosen(q, lines)
    analyst_cert, server_cert = q.pld or chosen, q.pld_server or lines.server
    out = (analyst_cert if a.observer == "analyst" else server_cert).as_dict()
    out["bound"] = "own noise per local step" if local and a.local_steps >= 2 else "joint noise"
    out["server"] = server_cert.as_dict()
    out["server_ex_post"] = lines.ex_post.as_dict(schema="checkin")
    if q.coal is not None:
        out["coalition"] = q.coal.as_dict()
    out["dropout_stages"] = a.dropout_stages if a.gamma is None else None
    if q.comparison:
        out["comparison"] = q.comparison
    out.update(
        {
            "gamma": q.gamma,
            "n": a.n,
            "mechanism": a.mechanism,
            "unit": "sample" if local else "client",
            "amplification": "joint-convexity" if local else a.amplification,
            "window_delta": a.window_delta,
        }
    )
    analyst = a.observer == "analyst"  # the rdp/window paths here certify the analyst view only
    out["epsilon_rdp"] = lines.rdp.epsilon if analyst else None
    out["epsilon_window"] = window.epsilon if window and analyst else None
    if analyst and window is None:
        out["epsilon_window_reason"] = "no check-in window has T * P(K outside window) < delta"
    if q.pld:
        out["epsilon_pld"] = q.pld.epsilon
    if q.pld_note:
        out["method_note"] = q.pld_note
    if not math.isfinite(out["epsilon"]):
        out["order"] = None
    if a.rdp:
        out["rdp"] = rdp_curve(chosen.rdp.keys(), chosen.rdp.values())
    if q.baselines:
        out["baselines"] = {k: {"epsilon": v["epsilon"], "method": v["method"]} for k, v in q.baselines.items()}
    return dumps(out)


_AMPLIFICATION = {"pair": "ZDW22 dominating pair", "thm27": "WBK19 Thm 27", "thm9": "WBK19 Thm 9"}


def _print_text(q: _Query, lines: _Lines) -> None:
    """The text table: the analyst's rdp, pld and window lines, baselines, then one line per observer."""
    a = q.args
    unit = "sample-level add-remove" if q.local else "client-level replace-one"
    print(
        f"distributed check-in: n={a.n} gamma={q.gamma:g} sigma={a.sigma:g} ({a.mechanism}, {unit}), "
        f"T={a.rounds}, delta={a.delta:g}"
    )
    print(f"  {'certificate':<34}{'epsilon':>12}{'order':>7}  detail")
    print("  (the rdp, pld and window lines certify the analyst view; the observer lines below say who)")
    auto = "ZDW22 dominating pair" if a.mechanism == "gaussian" else "WBK19 Thm 9"
    amp = "joint convexity" if q.local else _AMPLIFICATION.get(a.amplification, auto)
    rdp = lines.rdp
    print(f"  {'full mixture (rdp)':<34}{rdp.epsilon:>12.6g}{rdp.order:>7}  rate k/n ({amp}), k=0 term kept")
    if q.pld_note:
        print(f"  note: {q.pld_note}")
    if q.pld:
        print(
            f"  {'privacy loss distribution (pld)':<34}{q.pld.epsilon:>12.6g}{'':>7}  analyst view, "
            f"optimistic {q.pld.epsilon_optimistic:.6g}, delta_tail={q.pld.delta_tail:.3g}"
        )
    w = lines.window
    if w:
        print(
            f"  {'window certificate (window)':<34}{w.epsilon:>12.6g}{w.order:>7}  "
            f"K in [{w.window[0]}, {w.window[1]}], "  # type: ignore[index]  # set by method="window"
            f"delta_window={w.delta_window:.3g}"
        )
    else:
        print(f"  {'window certificate (window)':<34}{'n/a':>12}")
    for name, v in q.baselines.items():
        print(f"  {'baseline: ' + name:<34}{v['epsilon']:>12.6g}{'':>7}  {v['method']}")
    _print_observers(q, lines)


def _print_observers(q: _Query, lines: _Lines) -> None:
    """One line per observer (analyst, server, coalition, the server's ex-post bound), the comparison, notes."""
    from secagg_dp.accounting.checkin.local_steps import SEED004_LABEL

    chosen, ex_post = _chosen(q, lines), lines.ex_post
    a_cert, s_cert = q.pld or chosen, q.pld_server or lines.server
    a_order = "" if q.pld else a_cert.order  # a PLD certificate (no order) only when pld
    s_order = "" if q.pld_server else s_cert.order  # likewise for pld_server
    print(
        f"  {'observer analyst (' + a_cert.method + ')':<34}{a_cert.epsilon:>12.6g}{a_order:>7}  "
        "sees K and the aggregate"
    )
    print(
        f"  {'observer server (' + s_cert.method + ')':<34}{s_cert.epsilon:>12.6g}{s_order:>7}  "
        "also sees who took part and who dropped"
    )
    if q.coal is not None:
        _print_coalition(q.coal)
    print(
        f"  {'server, ex-post (took part in all)':<34}{ex_post.epsilon:>12.6g}{_int_or_blank(ex_post.order):>7}  "
        "ex-post: for a client seen in every round"
    )
    if q.comparison:
        print(
            f"  {'comparison: ' + SEED004_LABEL:<34}{q.comparison['epsilon']:>12.6g}{'':>7}  "
            "certificate: false (adaptive local steps beat it)"
        )
    if lines.largest_order:
        print("  note: optimal order is the largest offered; raise --max-order for a smaller epsilon")


def _int_or_blank(order: float | None) -> int | str:
    """A Rényi order as the integer it is (the check-in grid is integral), blank when there is none."""
    return "" if order is None else int(order)


class _JointConvexityTable:
    """Per-k table amplified by joint convexity at rate k/n (for the labelled joint-noise comparison)."""

    def __init__(self, table: PerKProvider, n: int) -> None:
        self.table, self.n, self.neighbouring = table, n, table.neighbouring

    def log_expm1_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        import numpy as np

        with np.errstate(divide="ignore"):
            out: np.ndarray = np.log(np.asarray(k_hi, dtype=np.float64) / self.n)[:, None] + self.table.log_expm1_upper(
                k_lo, k_hi, orders
            )
        return out


def register_calibrate(subparsers: Subparsers) -> None:
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
