"""Benchmark: tight PLD check-in accountant against today's RDP paths (Gaussian, sigma = 1, replace-one, analyst).

For each row of the reference table (n = 10^4, gamma = 0.1, delta = 1e-4; n = 6e5, gamma = 1e-3, delta = 1e-8)
prints the RDP-path certificates (``rdp``: full mixture, ``window``), the new ``pld`` certificate and its
optimistic value, the independent tight value and one-pair lower bound the accountant was specified against,
the tightness ratio pld / lower bound, and wall-clock seconds of the pld and window paths measured in the same
run (each the path ``checkin_pld`` / ``checkin_epsilon(method="window")`` users call, with the default
check-in orders: every integer to 256, then every 16th to 1024). ``rdp256``/``win256`` repeat the RDP paths
with WBK19 Theorem 27 and orders 2..256, the RDP path before the dominating-pair bound (same run).
Then the speed targets: n = 6e5, T = 10^4 and n = 10^9 (gamma = 1e-3 and 1e-6, T = 10^4).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from secagg_dp.accounting.checkin.bases import GaussianSum
from secagg_dp.accounting.checkin.mixture import DEFAULT_ORDERS, SubsampledCheckin, checkin_epsilon
from secagg_dp.accounting.checkin.pld import checkin_pld

ORDERS = DEFAULT_ORDERS
OLD_ORDERS = np.arange(2, 257)
# (n, gamma, delta, T, tight upper, one-pair lower bound): independent values; origin recorded in the file
_VECTORS = Path(__file__).resolve().parents[1] / "tests" / "accounting" / "vectors"
_REF = json.loads((_VECTORS / "pld_checkin_reference.json").read_text())
ROWS = [(int(r[0]), r[1], r[2], int(r[3]), r[6], r[7]) for r in _REF["rows"]]


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def rdp_paths(n: int, gamma: float, t: int, delta: float, *, old: bool = False) -> tuple[float, float, float]:
    prov = SubsampledCheckin(GaussianSum(1.0), n, amplification="thm27" if old else "auto")
    orders = OLD_ORDERS if old else ORDERS
    rdp = checkin_epsilon(prov, n, gamma, t, delta, orders, method="rdp").epsilon
    sec, win = timed(lambda: checkin_epsilon(prov, n, gamma, t, delta, orders, method="window"))
    return rdp, win.epsilon, sec


def main() -> None:
    import warnings

    warnings.simplefilter("ignore")  # the RDP paths warn that the largest order binds; part of the comparison
    print("Gaussian distributed check-in, sigma = 1, replace-one, analyst view")
    head = (
        f"{'n':>7} {'gamma':>6} {'delta':>6} {'T':>6} {'rdp256':>8} {'win256':>8} {'rdp':>8} {'window':>8} "
        f"{'pld':>9} {'pld opt':>9} {'tight':>8} {'lower':>8} {'pld/low':>8} {'pld/tight':>9} {'t_pld s':>8} "
        f"{'t_win s':>8} {'ratio':>6}"
    )
    print(head)
    for n, gamma, delta, t, tight, lower in ROWS:
        rdp0, win0, _ = rdp_paths(n, gamma, t, delta, old=True)
        rdp, win, t_win = rdp_paths(n, gamma, t, delta)
        t_pld, cert = timed(lambda n=n, gamma=gamma, t=t, delta=delta: checkin_pld(n, gamma, 1.0, t, delta))
        print(
            f"{n:>7.0e} {gamma:>6g} {delta:>6g} {t:>6} {rdp0:>8.4f} {win0:>8.4f} {rdp:>8.4f} {win:>8.4f} "
            f"{cert.epsilon:>9.5g} {cert.epsilon_optimistic:>9.5g} {tight:>8.5g} {lower:>8.5g} "
            f"{cert.epsilon / lower:>8.4f} {cert.epsilon / tight:>9.4f} {t_pld:>8.2f} {t_win:>8.2f} "
            f"{t_pld / t_win:>6.2f}"
        )
    print("\nspeed targets (T = 10^4, delta = 1e-8; ratio = pld time / window time, same run)")
    print(f"{'n':>7} {'gamma':>6} {'pld':>10} {'window':>9} {'t_pld s':>8} {'t_win s':>8} {'ratio':>6} {'blocks':>7}")
    for n, gamma in ((6 * 10**5, 1e-3), (10**9, 1e-3), (10**9, 1e-6)):
        _, win, t_win = rdp_paths(n, gamma, 10**4, 1e-8)
        t_pld, cert = timed(lambda n=n, gamma=gamma: checkin_pld(n, gamma, 1.0, 10**4, 1e-8))
        print(
            f"{n:>7.0e} {gamma:>6g} {cert.epsilon:>10.4g} {win:>9.4g} {t_pld:>8.2f} {t_win:>8.2f} "
            f"{t_pld / t_win:>6.2f} {cert.blocks:>7}"
        )


if __name__ == "__main__":
    main()
