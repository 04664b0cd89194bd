"""Time per epsilon evaluation for each mechanism, and the ratio against dp-accounting in the same run.

For each event: build it, compute its RDP at DEFAULT_ORDERS (2..256, 512, 1024), compose 100 rounds and
convert to epsilon at delta = 1e-5. dp-accounting runs the same event where it has one (Gaussian, Poisson
Gaussian, sampled-without-replacement Gaussian); DDG and Skellam have no dp-accounting event, so only our time
is reported. Ratio > 1 means we are faster. Usage: python benchmarks/bench_accounting.py [--repeat R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from dp_accounting import dp_event as E
from dp_accounting.rdp import rdp_privacy_accountant as dpa

from secagg_dp.accounting import (
    DEFAULT_ORDERS,
    DistributedDiscreteGaussian,
    Gaussian,
    PoissonSampled,
    RdpAccountant,
    SampledWithoutReplacement,
    Skellam,
)

ORD = list(DEFAULT_ORDERS)


def _time(fn, repeat: int) -> float:
    fn()  # warm-up (caches, imports)
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def ours(event, neighbouring):
    return lambda: RdpAccountant(neighbouring).compose(event, 100).get_epsilon(1e-5)


def theirs(event, relation):
    def run():
        acc = dpa.RdpAccountant(ORD, relation)
        acc.compose(event, 100)
        return acc.get_epsilon(1e-5)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    NR = dpa.NeighborRel
    rows = [
        (
            "gaussian",
            ours(Gaussian(1.0, 1.0, "add-remove"), "add-remove"),
            theirs(E.GaussianDpEvent(1.0), NR.ADD_OR_REMOVE_ONE),
        ),
        (
            "poisson gaussian q=0.01",
            ours(PoissonSampled(0.01, Gaussian(1.0, 1.0, "add-remove")), "add-remove"),
            theirs(E.PoissonSampledDpEvent(0.01, E.GaussianDpEvent(1.0)), NR.ADD_OR_REMOVE_ONE),
        ),
        # sigma/C = 2 under replace-one is dp-accounting's z = 1 (it uses the replace-one sensitivity 2C)
        (
            "wor gaussian m/N=10/1000 (z=1)",
            ours(SampledWithoutReplacement(10, 1000, Gaussian(2.0, 2.0, "replace-one")), "replace-one"),
            theirs(E.SampledWithoutReplacementDpEvent(1000, 10, E.GaussianDpEvent(1.0)), NR.REPLACE_ONE),
        ),
        (
            "wor gaussian m/N=10/1000 (z=5, fresh)",
            lambda: (
                RdpAccountant("replace-one")
                .compose(
                    SampledWithoutReplacement(10, 1000, Gaussian(10.0 + 1e-9 * np.random.rand(), 2.0, "replace-one")),
                    100,
                )
                .get_epsilon(1e-5)
            ),
            theirs(E.SampledWithoutReplacementDpEvent(1000, 10, E.GaussianDpEvent(5.0)), NR.REPLACE_ONE),
        ),
        (
            "ddg n=100 d=65536",
            ours(DistributedDiscreteGaussian(100, 763.0, 65536, 7632.08, 1.95e6, "add-remove"), "add-remove"),
            None,
        ),
        ("skellam n=100 d=65536", ours(Skellam(100 * 763.0**2, 7632.08, 1.95e6, "add-remove"), "add-remove"), None),
        (
            "poisson ddg q=0.01 (ZW19)",
            ours(
                PoissonSampled(0.01, DistributedDiscreteGaussian(100, 763.0, 65536, 7632.08, 1.95e6, "add-remove")),
                "add-remove",
            ),
            None,
        ),
        (
            "poisson skellam q=0.01 (ZW19)",
            ours(PoissonSampled(0.01, Skellam(100 * 763.0**2, 7632.08, 1.95e6, "add-remove")), "add-remove"),
            None,
        ),
    ]
    print(f"{'event (100 rounds, 259 orders)':42s} {'ours ms':>10s} {'dp-acc ms':>10s} {'ratio':>8s}")
    for name, f_ours, f_theirs in rows:
        t1 = _time(f_ours, args.repeat) * 1e3
        if f_theirs is None:
            print(f"{name:42s} {t1:10.2f} {'-':>10s} {'-':>8s}")
        else:
            t2 = _time(f_theirs, args.repeat) * 1e3
            print(f"{name:42s} {t1:10.2f} {t2:10.2f} {t2 / t1:8.2f}")


if __name__ == "__main__":
    main()
