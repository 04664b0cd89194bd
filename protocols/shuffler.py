"""Trusted-shuffler protocol: self check-in, local randomization, identity stripping, uniform permutation.

Roles (LHT22 Sec. 3 and App. C Algorithm 1; LT22 Sec. 2):

1. each client flips its own γ-biased coin (check-in) and, if in, randomizes its value locally —
   Gaussian x + N(0, σ²) or binary randomized response with parameter ε0 — and sends a :class:`Report`
   (sender id + payload) over its authenticated channel to the shuffler;
2. the :class:`Shuffler` drops the sender ids and outputs the payloads in a uniformly random order
   (Fisher–Yates driven by ``secrets.randbelow``, i.e. the OS CSPRNG, unless a generator is injected for
   reproducible tests);
3. the :class:`Analyzer` sees only the anonymous batch: a tuple of payloads, no identities, no order
   information; it aggregates (sum / mean, or the debiased RR count).

Accounting for this protocol: :mod:`secagg_dp.accounting.shuffle.shuffled_checkin` (Gaussian) and
:mod:`secagg_dp.accounting.shuffle.ldp` (ε0 / (ε0, δ0)-LDP).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from secagg_dp._validate import check_finite_array, check_probability, check_real
from secagg_dp.errors import ParameterError, ProtocolError
from secagg_dp.rng import resolve_rng

__all__ = [
    "Report",
    "AnonymousBatch",
    "Shuffler",
    "Analyzer",
    "uniform_permutation",
    "client_reports",
    "run_round",
]


@dataclass(frozen=True)
class Report:
    """A client's message to the shuffler: its id (known to the shuffler only) and its randomized payload."""

    sender: int
    payload: float = field(repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.sender, bool) or not isinstance(self.sender, int) or self.sender < 0:
            raise ParameterError(f"Argument 'sender' must be a non-negative integer, not {self.sender!r}.")
        if not math.isfinite(float(self.payload)):
            raise ParameterError(f"Argument 'payload' must be finite, not {self.payload!r}.")


@dataclass(frozen=True)
class AnonymousBatch:
    """What the analyzer receives: payloads only, in shuffled order. Carries no sender information."""

    payloads: tuple[float, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.payloads, tuple):
            raise TypeError("Argument 'payloads' must be a tuple.")


def uniform_permutation(k: int, *, rng: np.random.Generator | None = None) -> list[int]:
    """A uniform permutation of range(k) by Fisher–Yates.

    With ``rng=None`` each swap index comes from ``secrets.randbelow`` (OS CSPRNG, exactly uniform, no
    modulo bias); a caller may inject a seeded ``np.random.Generator`` for reproducible tests
    (``Generator.integers`` is also unbiased).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ParameterError(f"Argument 'k' must be a non-negative integer, not {k!r}.")
    if rng is not None and not isinstance(rng, np.random.Generator):
        raise TypeError(f"Argument 'rng' must be a numpy.random.Generator or None, not {type(rng).__name__}.")
    perm = list(range(k))
    for i in range(k - 1, 0, -1):
        j = secrets.randbelow(i + 1) if rng is None else int(rng.integers(0, i + 1))
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Shuffler:
    """Trusted shuffler: collects reports for one round, refuses duplicates, emits an anonymous batch."""

    def __init__(self, *, rng: np.random.Generator | None = None) -> None:
        self._rng = rng
        self._reports: list[Report] = []
        self._senders: set[int] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"Shuffler(received={len(self._reports)}, closed={self._closed})"

    def receive(self, report: Report) -> None:
        if self._closed:
            raise ProtocolError("The shuffler has already emitted this round's batch.")
        if not isinstance(report, Report):
            raise TypeError(f"Argument 'report' must be a Report, not {type(report).__name__}.")
        if report.sender in self._senders:
            raise ProtocolError(f"Duplicate report from sender {report.sender} in one round.")
        self._senders.add(report.sender)
        self._reports.append(report)

    def emit(self) -> AnonymousBatch:
        """Strip identities and permute uniformly; the round is then closed."""
        if self._closed:
            raise ProtocolError("The shuffler has already emitted this round's batch.")
        self._closed = True
        perm = uniform_permutation(len(self._reports), rng=self._rng)
        batch = AnonymousBatch(tuple(float(self._reports[i].payload) for i in perm))
        self._reports.clear()
        self._senders.clear()
        return batch


class Analyzer:
    """Untrusted analyzer: aggregates an anonymous batch (it never receives a :class:`Report`)."""

    @staticmethod
    def total(batch: AnonymousBatch) -> float:
        if not isinstance(batch, AnonymousBatch):
            raise TypeError(f"The analyzer accepts only an AnonymousBatch, not {type(batch).__name__}.")
        return math.fsum(batch.payloads)

    @staticmethod
    def rr_count(batch: AnonymousBatch, eps0: float) -> float:
        """Unbiased estimate of how many checked-in clients hold 1 under binary randomized response."""
        if not isinstance(batch, AnonymousBatch):
            raise TypeError(f"The analyzer accepts only an AnonymousBatch, not {type(batch).__name__}.")
        eps0 = check_real("eps0", eps0, lo=0.0, lo_open=True)
        p = math.exp(eps0) / (1.0 + math.exp(eps0))
        ones = sum(1 for v in batch.payloads if v == 1.0)
        k = len(batch.payloads)
        return (ones - (1.0 - p) * k) / (2.0 * p - 1.0)


def client_reports(
    values: Sequence[float] | np.ndarray,
    *,
    gamma: float,
    mechanism: str,
    sigma: float | None = None,
    eps0: float | None = None,
    rng: np.random.Generator | None = None,
) -> list[Report]:
    """Each client i checks in with probability γ by its own coin and randomizes ``values[i]`` locally.

    ``mechanism="gaussian"``: payload x + N(0, σ²). ``mechanism="rr"``: x ∈ {0, 1} kept with probability
    e^{ε0}/(1+e^{ε0}), flipped otherwise (ε0-LDP). ``rng=None`` uses the secure default generator.
    """
    x = check_finite_array("values", values, ndim=1)
    gamma = check_probability("gamma", gamma)
    gen = resolve_rng(rng)
    if mechanism == "gaussian":
        if sigma is None:
            raise ParameterError("Argument 'sigma' is required for mechanism 'gaussian'.")
        sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    elif mechanism == "rr":
        if eps0 is None:
            raise ParameterError("Argument 'eps0' is required for mechanism 'rr'.")
        eps0 = check_real("eps0", eps0, lo=0.0, lo_open=True)
        if not np.all((x == 0.0) | (x == 1.0)):
            raise ParameterError("Argument 'values' must be 0/1 for mechanism 'rr'.")
    else:
        raise ParameterError(f"Argument 'mechanism' must be 'gaussian' or 'rr', not {mechanism!r}.")
    checked_in = gen.random(x.size) < gamma
    reports = []
    sd = 0.0 if sigma is None else sigma  # set and checked above when mechanism == "gaussian"
    e = 1.0 if eps0 is None else math.exp(eps0)  # set and checked above when mechanism == "rr"
    for i in np.nonzero(checked_in)[0]:
        if mechanism == "gaussian":
            payload = float(x[i] + sd * gen.standard_normal())
        else:
            keep = gen.random() < e / (1.0 + e)
            payload = float(x[i]) if keep else 1.0 - float(x[i])
        reports.append(Report(int(i), payload))
    return reports


def run_round(
    values: Sequence[float] | np.ndarray,
    *,
    gamma: float,
    mechanism: str,
    sigma: float | None = None,
    eps0: float | None = None,
    rng: np.random.Generator | None = None,
) -> AnonymousBatch:
    """One round: check-in and local randomization, shuffling, and the batch handed to the analyzer."""
    gen = resolve_rng(rng)
    shuffler = Shuffler(rng=rng)  # rng=None → secrets-driven Fisher–Yates
    for rep in client_reports(values, gamma=gamma, mechanism=mechanism, sigma=sigma, eps0=eps0, rng=gen):
        shuffler.receive(rep)
    return shuffler.emit()
