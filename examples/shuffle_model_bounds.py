"""Shuffle model: what is certified and what is only a lower bound, side by side.

Gaussian randomizers (noise std sigma, sensitivity 1) and a trusted shuffler; replace-one neighbours.
Prints, for T rounds: the shuffle Gaussian formula (Liew & Takahashi 2022, Theorem 1: a LOWER bound, not
a certificate), the Gaussian without shuffling (their Corollary 1: a certificate), and for shuffled
check-in (Liew, Hasegawa & Takahashi 2022, Theorem 2 at rate k/n) the certified windowed sum with the
Gaussian base and the rigorous pair lower bound. The true privacy loss lies between the lower bounds
and the certificates; only certificates may be reported as guarantees.
Run: python examples/shuffle_model_bounds.py
"""

from __future__ import annotations

import warnings

import numpy as np

from secagg_dp.accounting import (
    LargestOrderWarning,
    rdp_to_dp,
    shuffle_gaussian_rdp,
    shuffle_gaussian_rdp_upper,
    shuffled_checkin_gaussian_rdp_pair_lower,
    shuffled_checkin_gaussian_rdp_windowed,
)

N, SIGMA, GAMMA, ROUNDS, DELTA = 10_000, 2.0, 0.1, 10, 1e-6
ORDERS = np.arange(2, 65)


def eps(rdp: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LargestOrderWarning)
        return rdp_to_dp(ORDERS, ROUNDS * rdp, DELTA)[0]


def main() -> None:
    print(f"n = {N}, sigma = {SIGMA}, T = {ROUNDS}, delta = {DELTA:g}, orders 2..{ORDERS[-1]}, replace-one")
    rows = [
        ("shuffle Gaussian, all n report", "lower bound", eps(shuffle_gaussian_rdp(ORDERS, n=N, sigma=SIGMA))),
        ("Gaussian without shuffling", "certificate", eps(shuffle_gaussian_rdp_upper(ORDERS, sigma=SIGMA))),
        (
            f"shuffled check-in gamma={GAMMA}, pair",
            "lower bound",
            eps(shuffled_checkin_gaussian_rdp_pair_lower(ORDERS, n=N, gamma=GAMMA, sigma=SIGMA)),
        ),
        (
            f"shuffled check-in gamma={GAMMA}, Gaussian base",
            "certificate",
            eps(shuffled_checkin_gaussian_rdp_windowed(ORDERS, n=N, gamma=GAMMA, sigma=SIGMA, base="gaussian-upper")),
        ),
    ]
    for name, kind, e in rows:
        print(f"  {name:<44} {kind:<12} eps = {e:.4g}")
    lower, cert = rows[2][2], rows[3][2]
    if lower > cert:
        raise SystemExit("a lower bound exceeds the certificate: one of them is wrong")


if __name__ == "__main__":
    main()
