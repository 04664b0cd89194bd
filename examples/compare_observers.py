"""One check-in deployment, two observers: what the analyst can learn versus what the server can learn.

n clients each check in with probability gamma per round and add Gaussian noise of std sigma (relative to
the clip norm C = 1); client-level, replace-one. The analyst sees the number of participants K and the
aggregate, so the K-client sum is amplified by subsampling at rate K/n (Wang, Balle & Kasiviswanathan
2019, Theorem 27) inside the binomial mixture (Liew, Hasegawa & Takahashi 2022). The secure-aggregation
server also sees who took part and who dropped: the participation flag is revealed and only the mixture
over K remains (exact for a revealed flag; RDP composition, Mironov 2017). The ex-post figure is for a
client the server saw in every round. All figures are upper bounds; docs/accounting/observers.md has the
formulas. The deployment is the README's: 600 000 clients, gamma = 1e-3, sigma = 1, delta = 1e-8.
Run: python examples/compare_observers.py
"""

from __future__ import annotations

import warnings

from secagg_dp.accounting import (
    OBSERVERS,
    CheckinCertificate,
    GaussianSum,
    LargestOrderWarning,
    SubsampledCheckin,
    checkin_epsilon,
    server_certificate,
    server_ex_post_certificate,
)

N, GAMMA, SIGMA, DELTA = 600_000, 1e-3, 1.0, 1e-8
HORIZONS = (10, 100)  # rounds T


def certify(rounds: int) -> tuple[list[tuple[str, CheckinCertificate]], bool]:
    """Every figure for T = ``rounds``, and whether some optimum sat at the largest order offered."""
    mech = GaussianSum(SIGMA)
    analyst = SubsampledCheckin(mech, N)  # the check-in mixture at rate k/n
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LargestOrderWarning)
        rows = [
            ("analyst, full mixture (rdp)", checkin_epsilon(analyst, N, GAMMA, rounds, DELTA)),
            ("analyst, window", checkin_epsilon(analyst, N, GAMMA, rounds, DELTA, method="window")),
            ("server, full mixture (rdp)", server_certificate(mech, N, GAMMA, rounds, DELTA)),
            ("server, window", server_certificate(mech, N, GAMMA, rounds, DELTA, method="window")),
            ("server, ex-post (took part in all T)", server_ex_post_certificate(mech, N, GAMMA, rounds, DELTA)),
        ]
    return rows, any(issubclass(w.category, LargestOrderWarning) for w in caught)


def best(rows: list[tuple[str, CheckinCertificate]], observer: str) -> CheckinCertificate:
    """The smaller of the two ex-ante certificates for ``observer`` (both hold at the same delta)."""
    return min((c for _, c in rows if c.observer == observer and not c.ex_post), key=lambda c: c.epsilon)


def main() -> None:
    print(
        f"n = {N}, gamma = {GAMMA:g}, sigma = {SIGMA} (Gaussian, C = 1), delta = {DELTA:g}, "
        f"client-level replace-one; observers {OBSERVERS}"
    )
    for rounds in HORIZONS:
        rows, at_largest = certify(rounds)
        print(f"\nT = {rounds}")
        print(f"  {'figure':<38}{'observer':<10}{'epsilon':>9}{'order':>7}")
        for name, c in rows:
            print(f"  {name:<38}{c.observer:<10}{c.epsilon:>9.4f}{c.order:>7}")
        if at_largest:
            print("  note: an optimum sat at the largest Rényi order offered (256); more orders can only lower it")
        analyst, server = best(rows, "analyst"), best(rows, "server")
        ex_post = rows[-1][1]
        print(
            f"  quote: eps = {analyst.epsilon:.4f} against the analyst ({analyst.method}), "
            f"eps = {server.epsilon:.4f} against the server ({server.method}), at delta = {DELTA:g}"
        )
        # the server sees strictly more than the analyst, and every figure here must be a certificate
        if not all(c.certificate and c.neighbouring == "replace-one" for _, c in rows):
            raise SystemExit("a figure is not a replace-one certificate")
        if not (ex_post.ex_post and ex_post.observer == "server"):
            raise SystemExit("the ex-post figure is not labelled as the server's ex-post bound")
        for method in ("rdp", "window"):
            a = next(c for _, c in rows if c.observer == "analyst" and c.method == method)
            s = next(c for _, c in rows if c.observer == "server" and c.method == method and not c.ex_post)
            if s.epsilon < a.epsilon:
                raise SystemExit(f"the server's {method} figure is below the analyst's: amplification went wrong")
    print("""
Which to quote:
  * analyst: for anyone who sees only the released aggregate and the number of participants (the
    released model, its users, the analyst); the secure-aggregation server is trusted not to reveal who
    took part. It is the smaller number because that observer does not know whether you took part.
  * server: whenever the secure-aggregation server is not trusted; it also sees exactly which clients
    took part and which dropped, so only the mixture over the number of participants protects you.
  * server ex-post: what the server learns about a client it saw in every one of the T rounds. It is
    conditioned on that participation, so it is not the ex-ante guarantee; report it next to the
    server figure, never instead of it. It grows with T much faster than the ex-ante figures.
Both the full-mixture and the window certificate are upper bounds at the same delta; quote the smaller.""")


if __name__ == "__main__":
    main()
