"""Certificates per observer: the analyst (sees K and the aggregate) and the secure-aggregation server.

The analyst view is the check-in mixture of :mod:`secagg_dp.accounting.checkin.mixture`: given K = k the
target is one of the k participants with probability k/n, and which one is hidden, so the k-client base
is amplified by subsampling at rate k/n (Wang, Balle & Kasiviswanathan 2019).

The server also learns who took part (the set U3 of the protocol) and who dropped. The participation flag
of the target is then revealed and data independent: per round it is Bernoulli(K/n) given K, and for an
output (flag, K, Y) the Rényi moment splits over the revealed variables exactly:

    e^{(lam-1) eps_server(lam)} = sum_k P(K=k) [(1 - k/n) + (k/n) e^{(lam-1) eps_base,k(lam)}]

(joint convexity is an equality for a revealed mixture index; the draft of Liew, Hasegawa & Takahashi
describes the same mixture for the analyst, Thm 1, before amplification). Composed over T rounds by RDP
composition (Mironov 2017 Prop. 1). This is :class:`SubsampledCheckin` with
``amplification="joint-convexity"``, used here as an exact identity rather than a bound.

Ex-post figure (labelled ``ex_post``): for a client that took part in every round, conditioning on the
revealed, data-independent flags, each round is the base mechanism with K = 1 + K', K' ~ Bin(n-1, gamma)
revealed: e^{(lam-1) eps(lam)} = E_{K'}[e^{(lam-1) eps_base,1+K'(lam)}]; composed over T. It bounds what
the server learns about a client it saw in every round, not the ex-ante guarantee.

Neighbouring relation: the base mechanism's (``replace-one`` at the client level for the check-in sums,
``add-remove`` of a sample for local steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.mixture import (
    DEFAULT_ORDERS,
    BaseMechanism,
    CheckinCertificate,
    SubsampledCheckin,
    checkin_epsilon,
    checkin_mixture,
    rdp_to_epsilon,
)
from secagg_dp.accounting.checkin.tails import log_binom_pmf
from secagg_dp.accounting.core.logspace import log_expm1


class _HonestShares(Protocol):
    """What :class:`~secagg_dp.accounting.checkin.coalition.Coalition` offers here (that module imports this one)."""

    def k_eff(self, k: np.ndarray) -> np.ndarray: ...


__all__ = ["server_view_provider", "server_certificate", "server_ex_post_certificate", "server_ex_post_log_moment"]


def server_view_provider(mechanism: BaseMechanism, n: int, neighbouring: str = "replace-one") -> SubsampledCheckin:
    """Per-k terms of the server view: log((k/n) expm1((lam-1) eps_base,k)), exact for the revealed flag."""
    return SubsampledCheckin(mechanism, n, amplification="joint-convexity", neighbouring=neighbouring)


def server_certificate(
    mechanism: BaseMechanism,
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    neighbouring: str = "replace-one",
    method: str = "rdp",
) -> CheckinCertificate:
    """(eps, delta) against the secure-aggregation server (participation revealed), T = ``rounds`` rounds.

    ``method`` as in :func:`~secagg_dp.accounting.checkin.mixture.checkin_epsilon` ("rdp" or "window")."""
    cert = checkin_epsilon(
        server_view_provider(mechanism, n, neighbouring), n, gamma, rounds, delta, orders, method=method
    )
    return _relabel(cert, observer="server")


def _relabel(cert: CheckinCertificate, *, observer: str) -> CheckinCertificate:
    from dataclasses import replace

    return replace(cert, observer=observer)


@dataclass(frozen=True)
class _Shifted:
    """log expm1((lam-1) eps_base,k_eff(1+k')): the base at one more participant (the target), for the ex-post
    sum and the random check-in moments; ``coalition`` (anything with ``k_eff``, non-decreasing) maps the count
    to the coalition's honest noise shares."""

    mechanism: BaseMechanism
    neighbouring: str = "replace-one"
    coalition: _HonestShares | None = None

    def _k(self, k: np.ndarray) -> np.ndarray:
        kk = np.atleast_1d(np.asarray(k, dtype=np.float64)) + 1.0
        return self.coalition.k_eff(kk) if self.coalition is not None else kk

    def log_expm1_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        o = np.asarray(orders, dtype=np.int64)
        return log_expm1((o[None, :] - 1.0) * self.mechanism.rdp_upper(self._k(k_lo), self._k(k_hi), o))


def _shifted_log_moment(shifted: _Shifted, others: int, p: float, orders: np.ndarray) -> np.ndarray:
    """Upper bound on log E[f(1 + Bin(others, p))], f(k) = e^{(lam-1) eps_base,k}: 1 + E[expm1(.)], the
    Bin = 0 term exact and the rest by :func:`checkin_mixture` (an upper bound)."""
    zero = np.array([0.0])
    head = shifted.log_expm1_upper(zero, zero, orders)[0]
    if others == 0 or p == 0.0:
        return np.asarray(np.logaddexp(0.0, head), dtype=np.float64)
    head = head + float(log_binom_pmf(others, zero, p)[0])
    tail = checkin_mixture(shifted, others, p, orders).log_sm1
    return np.asarray(np.logaddexp(0.0, np.logaddexp(head, tail)), dtype=np.float64)


def server_ex_post_log_moment(
    mechanism: BaseMechanism,
    n: int,
    gamma: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    neighbouring: str = "replace-one",
) -> np.ndarray:
    """Per-round (lam - 1) eps_ex-post(lam) = log E[e^{(lam-1) eps_base,1+K'(lam)}], K' ~ Bin(n-1, gamma), for a
    client that took part (the K' = 0 term added exactly, K' >= 1 by :func:`checkin_mixture`, an upper bound).

    Pure; T rounds compose to ``T * moment / (orders - 1)`` (Mironov 2017, Prop. 1)."""
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma)
    orders = np.asarray(orders, dtype=np.int64)
    return _shifted_log_moment(_Shifted(mechanism, neighbouring), n - 1, gamma, orders)


def server_ex_post_certificate(
    mechanism: BaseMechanism,
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    orders: np.ndarray = DEFAULT_ORDERS,
    *,
    neighbouring: str = "replace-one",
) -> CheckinCertificate:
    """EX-POST (eps, delta) against the server for a client that took part in all T rounds.

    Per round 1/(lam-1) log E[e^{(lam-1) eps_base,1+K'}], K' ~ Bin(n-1, gamma)
    (:func:`server_ex_post_log_moment`); composed over T. The accountant form is
    ``CheckinAccountant(observer="server", ex_post=True)``."""
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma)
    rounds = check_int("rounds", rounds, lo=1)
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    orders = np.asarray(orders, dtype=np.int64)
    # T times the per-round curve, the expression of CheckinAccountant(observer="server", ex_post=True)
    total = rounds * (
        server_ex_post_log_moment(mechanism, n, gamma, orders, neighbouring=neighbouring) / (orders - 1.0)
    )
    eps, order = rdp_to_epsilon(orders=orders, rdp=total, delta=delta)
    return CheckinCertificate(
        eps,
        delta,
        order,
        "rdp",
        neighbouring,
        rounds,
        {int(o): float(v) for o, v in zip(orders, total, strict=True)},
        None,
        delta,
        0.0,
        observer="server",
        certificate=True,
        ex_post=True,
    )
