"""Certificates for the ``coalition`` observer: an active secure-aggregation server colluding with c clients.

**The adversary.** The server of Bonawitz et al. (2017, Sec. 6, active adversary) or of SecAgg+ (Bell et al.
2020), deviating arbitrarily, together with c corrupt clients whose inputs, noise and keys it knows. Like the
``server`` observer it sees who took part (the participation flag of the target) and K; it may also declare
honest clients "dropped" so that their inputs leave the sum, down to the smallest sum the protocol lets
finish: ``min_sum`` = m clients (full graph: the threshold t the honest clients enforce; SecAgg+: t as well,
because the target's self-mask is only removed once t of its holders revealed it, and those holders are listed
survivors whose inputs are in the sum). Neighbouring relation: the base mechanism's (``replace-one`` at the
client level for the check-in sums, ``add-remove`` of a sample for local steps).

**Derivation (per round).** K ~ Bin(n, gamma) clients take part, data independent, as in the server view
(:mod:`secagg_dp.accounting.checkin.observers`). Given K = k and the target in the round (probability k/n,
revealed), the coalition's view is (flag, K, Y) with Y the released sum minus the colluders' inputs and
noise, i.e. the sum of the honest clients the server kept in. The server keeps at least m clients, of whom at
most c are colluders, so at least

    k_eff(k) = max(1, min(k, m) - c)

honest clients (the target among them; if the target is excluded, Y does not depend on its input) are in Y,
each adding its own independent noise share. More honest clients only add independent noise (a
post-processing of the view with fewer), so the fewest is the worst case, and the base mechanism evaluated at
k_eff(k) bounds the view. Rounds with k < m abort (nothing is released beyond the data-independent flags
and K), so any bound holds there and k_eff(k) = max(1, k - c) <= k is one. The formula is conservative
whether the c colluders are counted among the k participants (min(k, m) - c honest at least) or come on
top of them (min(k, m - c) >= min(k, m) - c). The revealed flag splits the Rényi moment exactly:

    e^{(lam-1) eps_coal(lam)} = sum_k P(K=k) [(1 - k/n) + (k/n) e^{(lam-1) eps_base,k_eff(k)(lam)}]

(:class:`~secagg_dp.accounting.checkin.mixture.SubsampledCheckin` with ``amplification="joint-convexity"``,
an identity for a revealed mixture index), composed over T rounds (Mironov 2017, Prop. 1). k_eff is
non-decreasing, so a block [k_lo, k_hi] maps into [k_eff(k_lo), k_eff(k_hi)] and the base's block bound there
bounds the block; every base of :mod:`~secagg_dp.accounting.checkin.bases` and
:mod:`~secagg_dp.accounting.checkin.local_steps` is non-increasing in k and k_eff(k) <= k, so the coalition
certificate is never below the server certificate, and equals it when c = 0 and m >= n (k_eff(k) = k).

**Add-then-remove enforcement** (:class:`~secagg_dp.accounting.checkin.enforced.EnforcedSkellamSum`; Jiang,
Wang & Chen 2024). The coalition may get every removable noise group removed (under SecAgg+ the server can
pass off dropped clients with no honest surviving neighbour as survivors, so the survivor count is not a safe
lower bound on the dropouts), so only level 0 is credited: each honest client keeps Skellam noise of variance
at least mu/N, N the roster size. With k clients in the sum, d ~ Bin(n - k, rho) roster members dropped (as in
:mod:`~secagg_dp.accounting.checkin.enforced`; d is revealed and data independent) and up to c colluders
added to the roster, N <= k + d + c, so Y carries Skellam noise of variance at least

    V_c(k, d) = k_eff(k) mu / (k + d + c),

and eps_k(a) = 1/(a-1) log sum_d P(d) exp((a-1) eps_Sk(a; V_c(k, d))) with eps_Sk the Skellam bound of
Agarwal, Kairouz & Liu (2021, Thm 3.5) (:func:`~secagg_dp.accounting.checkin.enforced.revealed_dropout_rdp`,
the machinery of the enforced base). V_c is not monotone in k (k_eff stops growing at m while the roster
keeps growing), so a block [k_lo, k_hi] is bounded by the numerator at k_lo and the roster at k_hi:
k + Bin(n - k, rho) is stochastically increasing in k and eps_Sk(a; V) decreasing in V, so
V = k_eff(k_lo) mu / (k_hi + d + c), d ~ Bin(n - k_hi, rho) bounds every k of the block.

**Assumed, not covered.** One sum per round: the consistency check of Bonawitz et al. (2017, Sec. 6) and
Bell et al. (2020) keeps an equivocating server from unmasking two different survivor sets (whose difference
could isolate the target). Not covered: a server that breaks the protocol's threshold (fewer than m clients
in a finished sum), more than c colluders, adaptive corruption during the round, and side channels outside
the view (flags, K, roster, Y).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int
from secagg_dp.accounting.checkin.mixture import (
    DEFAULT_ORDERS,
    BaseMechanism,
    CheckinCertificate,
    SubsampledCheckin,
    checkin_epsilon,
)
from secagg_dp.accounting.checkin.observers import server_view_provider
from secagg_dp.accounting.core.rdp import skellam_rdp
from secagg_dp.errors import ParameterError

if TYPE_CHECKING:
    from secagg_dp.accounting.checkin.enforced import EnforcedSkellamSum

__all__ = [
    "Coalition",
    "CoalitionBase",
    "CoalitionEnforcedSkellamSum",
    "coalition_view_provider",
    "coalition_certificate",
]


@dataclass(frozen=True)
class Coalition:
    """The coalition: ``colluders`` c >= 0 corrupt clients with the server; ``min_sum`` m >= 1, the smallest
    number of clients in a sum the protocol lets finish (the threshold t of Bonawitz et al. 2017)."""

    colluders: int
    min_sum: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "colluders", check_int("colluders", self.colluders, lo=0, strict=True))
        object.__setattr__(self, "min_sum", check_int("min_sum", self.min_sum, lo=1, strict=True))

    def k_eff(self, k: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """k_eff(k) = max(1, min(k, m) - c): the fewest honest noise shares in a sum of k clients."""
        kk = np.asarray(k, dtype=np.float64)
        out: npt.NDArray[np.float64] = np.maximum(1.0, np.minimum(kk, float(self.min_sum)) - self.colluders)
        return out

    def as_dict(self) -> dict[str, int]:
        """``{"colluders": c, "min_sum": m}`` (the certificate's detail)."""
        return {"colluders": self.colluders, "min_sum": self.min_sum}


def _check_coalition(coalition: Any, n: int | None = None) -> Coalition:
    if not isinstance(coalition, Coalition):
        raise ParameterError(
            f"Argument 'coalition' must be a Coalition(colluders, min_sum), not {type(coalition).__name__}."
        )
    if n is not None and coalition.min_sum > n:
        raise ParameterError(
            f"Argument 'coalition.min_sum' must be at most n = {n} (no sum has more clients), not {coalition.min_sum}."
        )
    return coalition


@dataclass(frozen=True)
class CoalitionBase:
    """The base ``mechanism`` at k_eff(k) honest clients (module docstring): block [k_lo, k_hi] -> the base's
    block bound on [k_eff(k_lo), k_eff(k_hi)], valid since k_eff is non-decreasing."""

    mechanism: BaseMechanism
    coalition: Coalition

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        lo = self.coalition.k_eff(np.atleast_1d(k_lo))
        hi = self.coalition.k_eff(np.atleast_1d(k_hi))
        return self.mechanism.rdp_upper(lo, hi, orders)


@dataclass(frozen=True)
class CoalitionEnforcedSkellamSum:
    """Add-then-remove enforcement seen by the coalition: level 0 only, V_c(k, d) = k_eff(k) mu / (k + d + c),
    d ~ Bin(n - k, rho) revealed; a block is bounded by k_eff(k_lo) over the roster at k_hi (module docstring)."""

    mechanism: EnforcedSkellamSum
    coalition: Coalition

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> npt.NDArray[np.float64]:
        los = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        his = np.broadcast_to(np.atleast_1d(np.asarray(k_hi, dtype=np.float64)), los.shape)
        a = tuple(float(o) for o in np.atleast_1d(np.asarray(orders, dtype=np.float64)))
        rows = [self._rdp_block(int(lo), int(hi), a) for lo, hi in zip(los.tolist(), his.tolist(), strict=True)]
        return np.array(rows, dtype=np.float64).reshape(los.size, len(a))

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (frozen, hashable instance; a handful per run)
    def _rdp_block(self, k_lo: int, k_hi: int, orders: tuple[float, ...]) -> npt.NDArray[np.float64]:
        """:func:`~secagg_dp.accounting.checkin.enforced.revealed_dropout_rdp` at V = k_eff(k_lo) mu / (k_hi + d + c),
        d ~ Bin(n - k_hi, rho). The cumulants (a - 1) eps_Sk(a; numerator / N) depend on the roster N = k_hi + d + c
        only, so one table over N serves every block with the same numerator (k_eff is constant for k >= m):
        the same terms, each evaluated once instead of once per block."""
        from secagg_dp.accounting.checkin.enforced import dropout_weights, revealed_mixture_rdp

        mech, c = self.mechanism, self.coalition.colluders
        n = mech.n
        k_hi = min(max(k_hi, k_lo, 0), n)
        numerator = float(self.coalition.k_eff(k_lo)) * mech.target_variance
        a = np.asarray(orders, dtype=np.float64)
        trials, rho = n - k_hi, mech.dropout_rate
        if trials == 0 or rho == 0.0:  # d = 0: the roster is k_hi + c
            eps = skellam_rdp(a, numerator / (k_hi + c), mech.l2_sensitivity, mech.l1_sensitivity)
            return np.asarray(eps, dtype=np.float64)
        ds, logw = dropout_weights(trials, rho)
        lo = k_hi + c + int(ds[0])  # rosters N = lo .. n + c, one per d = ds
        l2, l1 = mech.l2_sensitivity, mech.l1_sensitivity
        if (n + c) * a.size <= _TABLE_ELEMENTS:
            table = _roster_cumulants(numerator, n + c, orders, l2, l1)

            def cumulants(rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
                r0 = int(rows[0])
                if rows.size == int(rows[-1]) - r0 + 1:  # a contiguous range (ascending): a view
                    block = table[lo + r0 : lo + r0 + rows.size]
                else:
                    block = table[lo + rows]
                return block if cols.size == a.size else block[:, cols]

        else:  # too large to keep: the rows each block needs only

            def cumulants(rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
                sub = a[cols]
                rosters = (lo + rows).astype(np.float64)
                eps = np.asarray(skellam_rdp(sub, numerator / rosters, l2, l1)).reshape(rows.size, sub.size)
                out: npt.NDArray[np.float64] = (sub - 1.0)[None, :] * eps
                return out

        # N grows with d and eps_Sk(a; numerator / N) with N: every column is non-decreasing down the rows
        return revealed_mixture_rdp(a, logw, cumulants)


#: Largest cumulant table kept (rosters x orders, float64): 32 MiB.
_TABLE_ELEMENTS = 1 << 22


@functools.lru_cache(maxsize=4)
def _roster_cumulants(
    numerator: float, top: int, orders: tuple[float, ...], l2_sensitivity: float, l1_sensitivity: float
) -> npt.NDArray[np.float64]:
    """(a - 1) eps_Sk(a; numerator / N) (Agarwal, Kairouz & Liu 2021, Thm 3.5, through
    :func:`~secagg_dp.accounting.core.rdp.skellam_rdp`) for every roster N = 0..``top`` (row N; row 0, no
    roster, is +inf) and order a (columns), read only."""
    a = np.asarray(orders, dtype=np.float64)
    table = np.full((top + 1, a.size), np.inf)
    rosters = np.arange(1, top + 1, dtype=np.float64)
    eps = np.asarray(skellam_rdp(a, numerator / rosters, l2_sensitivity, l1_sensitivity))
    table[1:] = (a - 1.0)[None, :] * eps.reshape(top, a.size)
    table.flags.writeable = False
    return table


def coalition_view_provider(
    mechanism: BaseMechanism, n: int, coalition: Coalition, neighbouring: str = "replace-one"
) -> SubsampledCheckin:
    """Per-k terms of the coalition view: log((k/n) expm1((lam-1) eps_base,k_eff(k))), the server view
    (participation revealed, joint convexity as an identity) over the base at k_eff(k) honest clients;
    :class:`CoalitionEnforcedSkellamSum` for an :class:`~secagg_dp.accounting.checkin.enforced.EnforcedSkellamSum`
    base."""
    from secagg_dp.accounting.checkin.enforced import EnforcedSkellamSum

    n = check_int("n", n, lo=1)
    coalition = _check_coalition(coalition, n)
    if not hasattr(mechanism, "rdp_upper"):
        raise ParameterError(
            f"Argument 'mechanism' must be a k-client base mechanism with rdp_upper(k_lo, k_hi, orders), "
            f"not {type(mechanism).__name__}."
        )
    base: BaseMechanism
    if isinstance(mechanism, EnforcedSkellamSum):
        base = CoalitionEnforcedSkellamSum(mechanism, coalition)
    else:
        base = CoalitionBase(mechanism, coalition)
    return server_view_provider(base, n, neighbouring)


def coalition_certificate(
    mechanism: BaseMechanism,
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    coalition: Coalition,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    neighbouring: str = "replace-one",
    method: str = "rdp",
) -> CheckinCertificate:
    """(eps, delta) against the coalition (server + ``coalition.colluders`` clients, sums of at least
    ``coalition.min_sum`` clients), T = ``rounds`` rounds; ``method`` "rdp" or "window" as in
    :func:`~secagg_dp.accounting.checkin.mixture.checkin_epsilon`. An upper bound (module docstring)."""
    from dataclasses import replace

    provider = coalition_view_provider(mechanism, n, coalition, neighbouring)
    cert = checkin_epsilon(provider, n, gamma, rounds, delta, orders, method=method)
    return replace(cert, observer="coalition", detail={**cert.detail, **coalition.as_dict()})
