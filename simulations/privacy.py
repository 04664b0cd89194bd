"""The simulator's accountant: one ledger event per round, certified epsilon from the check-in accountant.

What is certified (every number an upper bound; neighbouring relation stated in results.json):

* ``task = "mean"`` (client level, ``replace-one``): each round is the distributed check-in mixture of
  ``secagg_dp.accounting.checkin`` over K ~ Bin(n, gamma) with, as k-client base mechanism, the sum of k
  clients' encoded vectors with discrete Gaussian (``DDGSum``, Kairouz, Liu & Steinke 2021) or Skellam
  (``SkellamSum``, Agarwal, Kairouz & Liu 2021) noise of per-client std ``sigma_int`` on the integer grid,
  sensitivities 2*Delta_2 and 2*Delta_1 of the codec (replace-one doubles the codec's add-remove bound),
  subsampled without replacement at rate k/n (WBK19 Thm 9, capped by the base RDP).
  gamma = p (1 - p')^3: a client is in the sum iff it checked in (own coin p) and did not drop at
  advertise_keys, share_keys or masked_input (probability p' each); one that drops earlier contributes
  neither data nor noise, which is exactly what the mixture over K models (seed 000 Sec. 3.2 with the
  per-stage dropout model of the simulator).
* ``sampling = "fixed"``: exactly m = round(p n) clients, sampled without replacement: the m-client base
  mechanism subsampled at rate m/n (WBK19 Thm 9, capped), i.e. the mixture term at k = m alone.
* ``task = "logreg"`` (sample level): the local-steps accountant of ``secagg_dp.accounting.local_steps``
  (seed 004 Thm 4.7 inside the check-in mixture) when available.

T rounds compose additively in RDP; ``method = "rdp"`` converts with the optimal-order conversion,
``method = "window"`` uses the window certificate. Each recorded round is written to an SQLite ledger
(one transaction per round, before results.json is rewritten), so a crash never under-counts: the ledger
holds at least every round that results.json reports.
"""

from __future__ import annotations

import math
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from secagg_dp.errors import ConfigError, ParameterError

__all__ = ["RoundLedger", "SimAccountant", "make_accountant", "effective_gamma"]


def effective_gamma(checkin: float, dropout: float) -> float:
    """P(a client's masked input arrives) = p (1 - p')^3 under the per-stage dropout model."""
    return checkin * (1.0 - dropout) ** 3


class RoundLedger:
    """Append-only SQLite log of the rounds recorded (one transaction per round)."""

    def __init__(self, path: str | Path, describe: dict[str, Any]) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path)
        with self._db:
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS rounds (round INTEGER PRIMARY KEY, event TEXT NOT NULL, "
                "epsilon REAL NOT NULL, delta REAL NOT NULL)"
            )
            self._db.execute("DELETE FROM rounds")  # a new run starts a new ledger
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('describe', ?)", (repr(describe),))

    def record(self, rnd: int, event: str, epsilon: float, delta: float) -> None:
        with self._db:  # one transaction: committed or not at all
            self._db.execute("INSERT INTO rounds VALUES (?, ?, ?, ?)", (rnd, event, epsilon, delta))

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0])

    def close(self) -> None:
        self._db.close()


class SimAccountant:
    """Per-round RDP computed once (the round's parameters do not change), composed over recorded rounds."""

    def __init__(self, cfg, plan, ledger_path: str | Path | None) -> None:  # noqa: ANN001
        from secagg_dp.accounting import checkin as ck

        self._ck = ck
        self.cfg = cfg
        self.orders = ck.DEFAULT_ORDERS
        self.delta = cfg.privacy.delta
        self.method = cfg.privacy.method
        self.n = cfg.population.clients
        self.gamma = effective_gamma(cfg.population.checkin, cfg.population.dropout)
        self.provider, self.neighbouring, self.event = self._provider(plan)
        self.fixed = cfg.population.sampling == "fixed"
        if self.fixed:
            m = cfg.population.fixed_size
            log_em1 = self.provider.log_expm1_upper(np.array([m]), np.array([m]), self.orders)[0]
            self.round_rdp = np.logaddexp(0.0, log_em1) / (self.orders - 1.0)
        else:
            self.round_rdp = ck.checkin_rdp(self.provider, self.n, self.gamma, self.orders)
        try:  # certify the whole planned run once up front: an impossible certificate fails before any work
            self.planned_epsilon = self.epsilon_after(cfg.rounds)[0]
        except ParameterError as exc:
            raise ConfigError(
                f"Config key 'privacy.method' = {self.method!r} cannot certify {cfg.rounds} rounds: {exc} "
                "To fix, add noise (privacy.noise_multiplier), use fewer rounds, or method = 'rdp'."
            ) from exc
        self.rounds = 0
        self.epsilon = 0.0
        self.order: int | None = None
        self.certificate: dict[str, Any] | None = None
        self.ledger = RoundLedger(ledger_path, self.describe()) if ledger_path is not None else None

    def _provider(self, plan):  # noqa: ANN001, ANN202
        from secagg_dp.accounting import checkin_mechanisms as cm

        priv, task = self.cfg.privacy, self.cfg.task
        if task.name == "logreg":
            try:
                from secagg_dp.accounting import local_steps  # noqa: F401
            except ImportError as exc:
                raise ConfigError(
                    "task 'logreg' needs the sample-level local-steps accountant (secagg_dp.accounting.local_steps), "
                    "which is not installed in this tree."
                ) from exc
            return _logreg_provider(self.cfg, plan)
        d2, d1 = 2.0 * plan.l2_sensitivity, 2.0 * plan.l1_sensitivity  # replace-one: twice the codec's bound
        if priv.mechanism == "ddg":
            mech = cm.DDGSum(sigma=plan.sigma_int, dim=plan.padded_dim, l2_sensitivity=d2, l1_sensitivity=d1)
        else:
            mech = cm.SkellamSum(variance=plan.sigma_int**2, l2_sensitivity=d2, l1_sensitivity=d1)
        provider = self._ck.SubsampledCheckin(mechanism=mech, n=self.n)
        event = f"{type(mech).__name__}({mech}) subsampled w/o replacement at k/n, n={self.n}"
        return provider, provider.neighbouring, event

    def describe(self) -> dict[str, Any]:
        fixed = self.cfg.population.sampling == "fixed"
        return {
            "accountant": "secagg_dp.accounting.checkin" + (" (fixed-size, k = m)" if fixed else " (binomial mixture)"),
            "method": self.method if not fixed else "rdp",
            "neighbouring": self.neighbouring,
            "unit": "sample" if self.cfg.task.name == "logreg" else "client",
            "delta": self.delta,
            "gamma": None if fixed else self.gamma,
            "sample_size": self.cfg.population.fixed_size if fixed else None,
            "event": self.event,
            "epsilon": self.epsilon,
            "order": self.order,
            "rounds": self.rounds,
            "planned_epsilon": getattr(self, "planned_epsilon", None),
            "certificate": self.certificate,
            "per_round_rdp": {int(o): float(v) for o, v in zip(self.orders, self.round_rdp)},
        }

    def epsilon_after(self, rounds: int) -> tuple[float, int | None, dict[str, Any]]:
        """Certified (epsilon, order, certificate dict) after ``rounds`` rounds (no state change)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # best order at the largest offered: reported, not an error
            if self.method == "window" and not self.fixed:
                cert = self._ck.window_certificate(self.provider, self.n, self.gamma, rounds, self.delta, self.orders)
                return cert.epsilon, cert.order, cert.as_dict()
            eps, order = self._ck.rdp_to_epsilon(rounds * self.round_rdp, self.orders, self.delta)
        return eps, order, {"epsilon": eps, "delta": self.delta, "order": order, "method": "rdp", "rounds": rounds}

    def record_round(self) -> tuple[float, int | None]:
        """Record one round in the ledger and return the certified (epsilon, order) so far."""
        eps, order, cert = self.epsilon_after(self.rounds + 1)  # compute first: a failure changes nothing
        if self.ledger is not None:
            self.ledger.record(self.rounds + 1, self.event, eps, self.delta)
        self.rounds += 1
        self.epsilon, self.order, self.certificate = eps, order, cert
        return eps, order

    def attach_ledger(self, path: str | Path) -> None:
        """Start the SQLite ledger at ``path`` (created with its folder)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.ledger = RoundLedger(path, self.describe())

    def close(self) -> None:
        if self.ledger is not None:
            self.ledger.close()


def _logreg_provider(cfg, plan):  # noqa: ANN001, ANN202
    raise ConfigError("task 'logreg' accounting: local-steps provider wiring pending (see report).")


def make_accountant(cfg, plan, ledger_path: str | Path | None = None) -> SimAccountant:  # noqa: ANN001
    return SimAccountant(cfg, plan, ledger_path)
