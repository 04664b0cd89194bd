"""Random check-ins: our certificate against pld-accounting (Feldman & Shenfeld 2025) in the same run.

Rows (sigma = 1, delta = 1e-5, one slot per epoch, --noise central, add-remove, gamma = 1): m = 100 for 1 and
10 epochs, m = 1000 for 1 epoch (pld-accounting at absolute accuracy 0.02 there, its adaptive default
elsewhere). For each row: pld-accounting's [lower, upper] bracket and CPU time, our certificate, our labelled
lower bound and CPU time (every cache cleared first), the speed ratio (theirs / ours, > 1 means we are
faster) and whether our certificate is inside their bracket; beside it, the command users run for the same row
(``secagg-dp account random-checkin ... --json`` in a fresh process, start-up included, CPU from
``RUSAGE_CHILDREN``; it must print the same certificate) and pld-accounting's time over it. Then distributed
queries: DDG and Skellam, n = 10^6, m = 1000, the analyst (amplified by the epoch coin), server and coalition
views by RDP, CPU time each (target <= 3 s). CPU time is ``time.process_time`` (the machine is shared). Also
prints the Poisson-subsampled PLD of dp-accounting at q = 1/m for reference.

Usage: python benchmarks/bench_random_checkin.py [--skip-pld-accounting]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

from secagg_dp.accounting.checkin import random_checkin as rc
from secagg_dp.accounting.checkin.bases import DDGSum, SkellamSum
from secagg_dp.accounting.checkin.coalition import Coalition

ROWS = [(100, 1, -1.0), (100, 10, -1.0), (1000, 1, 0.02)]


def _ours(m: int, epochs: int) -> tuple[float, float, float]:
    rc._allocation_epoch.cache_clear()
    t = time.process_time()
    ev = rc.RandomCheckinEpoch(rc.CentralGaussian(1.0), 10**6, 1.0, m, 1, "add-remove")
    r = rc.random_checkin_pld([(ev, epochs)], 1e-5)
    return r.epsilon, r.epsilon_lower, time.process_time() - t


def _command(m: int, epochs: int) -> tuple[float, float]:
    """(epsilon, CPU seconds) of ``secagg-dp account random-checkin`` for the row, in a fresh process."""
    argv = ["account", "random-checkin", "--n", str(10**6), "--gamma", "1", "--epoch-rounds", str(m)]
    argv += ["--epochs", str(epochs), "--noise", "central", "--sigma", "1", "--delta", "1e-5", "--json"]
    code = "import sys; from simulations.cli import main; sys.exit(main())"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return float(json.loads(res.stdout)["epsilon"]), cpu


def _theirs(m: int, epochs: int, acc: float) -> tuple[float, float, float]:
    from PLD_accounting import gaussian_allocation_epsilon_range

    t = time.process_time()
    upper, lower = gaussian_allocation_epsilon_range(
        delta=1e-5, sigma=1.0, num_steps=m, num_epochs=epochs, epsilon_accuracy=acc
    )
    return upper, lower, time.process_time() - t


def _poisson(m: int, epochs: int) -> float:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_event.PoissonSampledDpEvent(1.0 / m, dp_event.GaussianDpEvent(1.0)), m * epochs)
    return float(acc.get_epsilon(1e-5))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-pld-accounting", action="store_true")
    args = ap.parse_args()
    _ours(10, 1)  # imports and first-use costs outside the timings
    print("central Gaussian, add-remove, sigma=1, delta=1e-5, b=1 (CPU seconds)")
    print(
        f"{'m':>5} {'E':>3} {'FS lower':>9} {'FS upper':>9} {'FS s':>7} {'ours':>9} {'ours lower':>10} "
        f"{'ours s':>7} {'ratio':>6} {'inside':>6} {'cmd s':>6} {'ratio':>6} {'Poisson':>8}"
    )
    for m, epochs, acc in ROWS:
        eps, low, t_ours = _ours(m, epochs)
        if args.skip_pld_accounting:
            up, lo_, t_fs = float("nan"), float("nan"), float("nan")
        else:
            try:
                up, lo_, t_fs = _theirs(m, epochs, acc)
            except ImportError:
                up, lo_, t_fs = float("nan"), float("nan"), float("nan")
        inside = lo_ <= eps <= up
        eps_cmd, t_cmd = _command(m, epochs)
        if eps_cmd != eps:
            raise SystemExit(f"the command printed {eps_cmd}, the library {eps}: not the same certificate")
        print(
            f"{m:>5} {epochs:>3} {lo_:>9.4f} {up:>9.4f} {t_fs:>7.2f} {eps:>9.4f} {low:>10.4f} {t_ours:>7.2f} "
            f"{t_fs / t_ours:>6.1f} {str(inside):>6} {t_cmd:>6.2f} {t_fs / t_cmd:>6.1f} {_poisson(m, epochs):>8.4f}"
        )
    print("\ndistributed noise, n=10^6, m=1000, replace-one, RDP, 10 epochs (CPU seconds; target <= 3 s a query)")
    scale = 256.0
    for name, mech in (
        ("ddg", DDGSum(1.0 * scale, 1000, 2 * scale, 2 * scale * 31.6)),
        ("skellam", SkellamSum((1.0 * scale) ** 2, 2 * scale, 2 * scale * 31.6)),
    ):
        for gamma, slots in ((0.5, 1), (0.5, 2), (0.05, 1)):
            for observer, coal in (("analyst", None), ("server", None), ("coalition", Coalition(100, 1000))):
                rc._rdp_cached.cache_clear()
                rc._stage_curve.cache_clear()
                t = time.process_time()
                ev = rc.RandomCheckinEpoch(mech, 10**6, gamma, 1000, slots)
                acc = rc.RandomCheckinAccountant(observer=observer, method="rdp", coalition=coal).compose(ev, 10)
                eps = acc.get_epsilon(1e-5)
                dt = time.process_time() - t
                print(
                    f"  {name:<8} gamma={gamma:<5} b={slots} {observer:<10} eps={eps:.4f}  {dt:.2f} s  "
                    f"{'<= 3 s' if dt <= 3 else '> 3 s'}"
                )


if __name__ == "__main__":
    main()
