"""The simulator's accountant: one ledger event per round, certified epsilon from the check-in accountant.

What is certified (every number an upper bound; neighbouring relation stated in results.json):

* ``task = "mean"`` (client level, ``replace-one``): each round is the distributed check-in mixture of
  ``secagg_dp.accounting.checkin.mixture`` over K ~ Bin(n, gamma) with, as k-client base mechanism, the sum of k
  clients' encoded vectors with discrete Gaussian (``DDGSum``, Kairouz, Liu & Steinke 2021) or Skellam
  (``SkellamSum``, Agarwal, Kairouz & Liu 2021) noise of per-client std ``sigma_int`` on the integer grid,
  sensitivities 2*Delta_2 and 2*Delta_1 of the codec (replace-one doubles the codec's add-remove bound),
  subsampled without replacement at rate k/n (WBK19 Thm 9, capped by the base RDP).
  gamma = p (1 - p')^3: a client is in the sum iff it checked in (own coin p) and did not drop at
  advertise_keys, share_keys or masked_input (probability p' each); one that drops earlier contributes
  neither data nor noise, which is exactly what the mixture over K models (SCI22 Sec. 3.2 with the
  per-stage dropout model of the simulator).
* ``task = "logreg"`` with ``privacy.unit = "client"`` (default; DP-FedAvg with distributed noise): each client
  clips its whole S-step update to C and adds its noise once, so the round is the same client-level
  ``replace-one`` mixture as for ``mean`` (joint noise of the k participants, any S).
* ``task = "logreg"`` with ``privacy.unit = "sample"`` (``add-remove`` of one training example): the k-client
  base is ``secagg_dp.accounting.checkin.local_steps.LocalStepsDDG`` / ``LocalStepsSkellam``: for S = 1 the
  step with the k clients' joint noise, for S >= 2 the S-fold composition of the client's OWN per-step noise
  (joint noise over several adaptive local steps is not an upper bound; docs/accounting/local-steps.md),
  Poisson rate q inside the client (Zhu & Wang 2019 Thm 5), sensitivities Delta_2, Delta_1 of ONE encoded
  sample. Client check-in amplifies through joint convexity at rate k/n only
  (``SubsampledCheckin(amplification="joint-convexity")``).
* ``sampling = "fixed"``: exactly m = round(p n) clients, sampled without replacement: the m-client term
  of the same provider alone (rate m/n).

Observers (docs/accounting/observers.md): the ledger's certificate is the ``analyst``'s (sees K and the
aggregate). ``describe()["server"]`` is the certificate against the secure-aggregation server, which also
sees who took part: the same event with :func:`secagg_dp.accounting.checkin.observers.server_view_provider`
(participation revealed; for fixed-size sampling the revealed m/n flag). ``describe()["coalition"]`` is the
certificate against an active server colluding with c = ``secagg.corrupt_clients`` clients, which may also
declare honest clients dropped down to the smallest sum the protocol lets finish (:func:`coalition_min_sum`):
the same event through ``CheckinAccountant(observer="coalition", coalition=Coalition(c, m))``
(:mod:`secagg_dp.accounting.checkin.coalition`).

Ledger: every round is spent as one :class:`secagg_dp.accounting.checkin.CheckinRound` event in the core
:class:`secagg_dp.accounting.core.ledger.PrivacyLedger` (SQLite, one transaction per event, committed before the
round's aggregate is decoded, optional (epsilon_budget, delta) refusal; the run's delta, method and certified
epsilon per observer are stored with it, each round's outcome after it). The event is the same every round
(the mixture is a function of the run's fixed parameters), so the ledger's composed RDP is exactly
T x the per-round mixture RDP.

Certificate: :class:`secagg_dp.accounting.checkin.CheckinAccountant` with ``privacy.method``: ``"rdp"`` (the
CKS20 conversion of the composed curve, equal to the ledger's), ``"window"`` (the window certificate for T
rounds, recomputed from T with the window of the planned run fixed), or ``"auto"`` (default): the certified
method with the smallest epsilon for the planned rounds (:func:`secagg_dp.accounting.checkin.tightest_method`;
PLD when the base is a Gaussian sum, which no simulator mechanism is, so rdp or window here). The ledger's RDP
epsilon stays a valid, possibly looser, certificate and is what the budget filter uses.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from secagg_dp.accounting.checkin.accountant import CheckinAccountant, tightest_method
from secagg_dp.accounting.checkin.coalition import Coalition
from secagg_dp.accounting.checkin.events import CheckinRound
from secagg_dp.accounting.checkin.mixture import LEDGER_ORDERS
from secagg_dp.accounting.checkin.providers import DPPlanLike
from secagg_dp.accounting.core.accountant import Certificate
from secagg_dp.accounting.core.ledger import PrivacyLedger
from secagg_dp.errors import ConfigError, ParameterError
from simulations.results import NO_PRIVACY_REASON

if TYPE_CHECKING:
    import numpy as np

    from secagg_dp.accounting.checkin.mixture import SubsampledCheckin
    from secagg_dp.noise.add_then_remove import NoiseSpec
    from simulations.config import SimConfig

__all__ = [
    "CheckinRound",
    "SimAccountant",
    "RandomCheckinSimAccountant",
    "RANDOM_CHECKIN_UNAVAILABLE",
    "NoPrivacyAccountant",
    "NO_PRIVACY_REASON",
    "make_accountant",
    "effective_gamma",
    "coalition_min_sum",
    "ORDERS",
]

#: Orders of the simulator's ledger: the library's :data:`~secagg_dp.accounting.checkin.mixture.LEDGER_ORDERS`
#: (the check-in accountant's grid up to 256, the integers 2..256).
ORDERS = LEDGER_ORDERS


class PlanLike(DPPlanLike, Protocol):
    """What the accountants read of a scenario's plan (:class:`simulations.runner.Plan`, which imports this
    module, hence a protocol): the library plan's fields and ``noise``, the parsed ``privacy.noise_enforcement``."""

    @property
    def noise(self) -> NoiseSpec | None: ...


def effective_gamma(checkin: float, dropout: float) -> float:
    """P(a client's masked input arrives) = p (1 - p')^3: three dropout stages before the masked input."""
    from secagg_dp.accounting.checkin.dropout import PROTOCOL_DROPOUT_STAGES, effective_checkin_rate

    return effective_checkin_rate(checkin, dropout, PROTOCOL_DROPOUT_STAGES)


class _LedgerOwner:
    """The ledger of a simulator accountant: opened with the run's relation, orders, budget and method, in
    memory until :meth:`attach_ledger` persists it."""

    rounds: int
    orders: np.ndarray
    delta: float
    budget: float | None
    neighbouring: str
    method: str
    ledger: PrivacyLedger
    ledger_path: Path | None
    cfg: SimConfig

    def _start(self, ledger_path: str | Path | None) -> None:
        """No round charged yet; the ledger in memory, or persisted at ``ledger_path``."""
        # privacy.target_epsilon: the calibration that chose privacy.noise_multiplier (simulations.calibrate),
        # set by the runner; recorded in describe()
        self.calibration: dict[str, Any] | None = None
        self.rounds = 0
        self.outcome_pending = False  # the last charged round has no outcome recorded yet
        self.epsilon = 0.0
        self.order: int | None = None
        self.certificate: dict[str, Any] | None = None
        self.ledger_path = None
        self.ledger = self._open_ledger(None)
        if ledger_path is not None:
            self.attach_ledger(ledger_path)

    def _run_keys(self) -> dict[str, Any]:
        """The keys of :meth:`describe` every simulator accountant reports alike (relation, unit, enforcement)."""
        return {
            "neighbouring": self.neighbouring,
            "unit": self.cfg.privacy.unit,
            "noise_enforcement": self.cfg.privacy.noise_enforcement,
            "dropout_tolerance": self.cfg.privacy.dropout_tolerance,
            "observer": "analyst",
            "delta": self.delta,
        }

    def _open_ledger(self, path: Path | None) -> PrivacyLedger:
        # no budget: neither key (the ledger's defaults, None)
        budget, delta = (None, None) if self.budget is None else (self.budget, self.delta)
        led = PrivacyLedger(self.neighbouring, self.orders, path=path, epsilon_budget=budget, delta=delta)
        return led.set_run(delta=self.delta, method=self.method, observer="analyst")

    def attach_ledger(self, path: str | Path) -> None:
        """Persist the ledger at ``path`` (folder created). A new run replaces a ledger left there by an
        earlier run: each ledger accounts exactly one simulated run (its own synthetic data)."""
        if self.rounds:
            raise ParameterError("attach_ledger must be called before the first round is recorded.")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            side = Path(os.fspath(path) + suffix)
            if side.exists():
                side.unlink()
        self.ledger.close()
        self.ledger = self._open_ledger(path)
        self.ledger_path = path

    def close(self) -> None:
        self.ledger.close()


class SimAccountant(_LedgerOwner):
    """Spends one :class:`CheckinRound` per simulated round in a :class:`PrivacyLedger`; reports epsilon."""

    def __init__(self, cfg: SimConfig, plan: PlanLike, ledger_path: str | Path | None) -> None:
        self._setup(cfg, plan)
        self._certify_planned_run(cfg)
        self._start(ledger_path)

    @classmethod
    def planned_epsilon_for(cls, cfg: SimConfig, plan: PlanLike, observer: str) -> float:
        """The certificate this accountant reports for ``observer`` (``"analyst"`` | ``"server"`` |
        ``"coalition"``) after the planned ``cfg.rounds`` rounds (``planned_epsilon``, ``server.planned_epsilon``,
        ``coalition.planned_epsilon``): the same event, method choice and accountant, computed for that observer
        alone and without a ledger (what :mod:`simulations.calibrate` evaluates). ParameterError where the
        method cannot certify the planned rounds."""
        self = cls.__new__(cls)
        self._setup(cfg, plan)
        method, _ = self._choose_method(cfg.rounds, observer)
        acc = self._accountant(method, observer, cfg.rounds)
        return float(acc.fresh().compose(self.event, cfg.rounds).certificate(self.delta).epsilon)

    def _setup(self, cfg: SimConfig, plan: PlanLike) -> None:
        """The run's fixed parameters and its per-round event (no certificate yet)."""
        self.cfg = cfg
        self.orders = ORDERS
        self.delta = cfg.privacy.delta
        self.budget = cfg.privacy.epsilon_budget
        self.fixed = cfg.population.sampling == "fixed"
        self.method_requested = cfg.privacy.method
        self.n = cfg.population.clients
        self.gamma = effective_gamma(cfg.population.checkin, cfg.population.dropout)
        self.noise = plan.noise  # privacy.noise_enforcement as parsed by the plan (NoiseSpec, or None)
        self.provider, self.label = _provider(cfg, plan)
        self.neighbouring = self.provider.neighbouring
        self.event = CheckinRound(
            provider=self.provider,
            clients=self.n,
            gamma=None if self.fixed else self.gamma,
            sample_size=cfg.population.fixed_size if self.fixed else None,
            neighbouring=self.neighbouring,
        )
        self.round_rdp = self.event.rdp(self.orders)
        self.ex_post_accountant = CheckinAccountant(
            "rdp", self.neighbouring, orders=self.orders, observer="server", ex_post=True
        )
        min_sum, self.min_sum_rule = coalition_min_sum(cfg)
        self.coalition = Coalition(colluders=cfg.secagg.corrupt_clients, min_sum=min_sum)

    def _certify_planned_run(self, cfg: SimConfig) -> None:
        """Choose each observer's method and certify the whole planned run once, up front."""
        try:  # certify the whole planned run once up front: an impossible certificate fails before any work
            self.method, self.methods_compared = self._choose_method(cfg.rounds, "analyst")
            self.accountant = self._accountant(self.method, "analyst", cfg.rounds)
            self.planned_epsilon = self.epsilon_after(cfg.rounds)[0]
            self.server_method, self.server_methods_compared = self._choose_method(cfg.rounds, "server")
            self.server_accountant = self._accountant(self.server_method, "server", cfg.rounds)
            self._server_certs: dict[int, Certificate] = {}
            self.server_planned_epsilon = self._server_cert(cfg.rounds).epsilon
            self.coalition_method, self.coalition_methods_compared = self._choose_method(cfg.rounds, "coalition")
            self.coalition_accountant = self._accountant(self.coalition_method, "coalition", cfg.rounds)
            self._coalition_certs: dict[int, Certificate] = {}
            self.coalition_planned_epsilon = self._coalition_cert(cfg.rounds).epsilon
        except ParameterError as exc:
            raise ConfigError(
                f"Config key 'privacy.method' = {self.method_requested!r} cannot certify {cfg.rounds} rounds: {exc} "
                "To fix, add noise (privacy.noise_multiplier), use fewer rounds, or method = 'rdp'."
            ) from exc

    def _choose_method(self, rounds: int, observer: str) -> tuple[str, dict[str, float] | None]:
        """The configured method, or with ``"auto"`` the certified method with the smallest epsilon for
        ``observer`` and the planned rounds (a function of the run's parameters only, never of its data).
        Fixed-size sampling has the RDP method only (window and PLD need check-in with probability gamma)."""
        if self.fixed:
            return "rdp", None
        if self.method_requested != "auto":
            return self.method_requested, None
        coalition = self._coalition_of(observer)
        return tightest_method(
            self.event, rounds, self.delta, orders=self.orders, observer=observer, coalition=coalition
        )

    def _coalition_of(self, observer: str) -> Coalition | None:
        """The run's :class:`~secagg_dp.accounting.checkin.Coalition` for observer ``"coalition"``, else None."""
        return self.coalition if observer == "coalition" else None

    def _accountant(self, method: str, observer: str, rounds: int) -> CheckinAccountant:
        """The run's accountant for ``observer``. Window method: the window is fixed to the planned run's best
        one (valid for every round count up to the planned one), so each round reuses one mixture."""
        coalition = self._coalition_of(observer)
        acc = CheckinAccountant(method, self.neighbouring, orders=self.orders, observer=observer, coalition=coalition)
        if method != "window":
            return acc
        window = acc.compose(self.event, rounds).certificate(self.delta).detail["window"]
        return CheckinAccountant(
            method, self.neighbouring, orders=self.orders, observer=observer, window=window, coalition=coalition
        )

    def _server_cert(self, rounds: int) -> Certificate:
        """The server's certificate after ``rounds`` rounds (cached: results.json is rewritten every round)."""
        if rounds not in self._server_certs:
            acc = self.server_accountant.fresh().compose(self.event, max(rounds, 0))
            self._server_certs[rounds] = acc.certificate(self.delta)
        return self._server_certs[rounds]

    def _coalition_cert(self, rounds: int) -> Certificate:
        """The coalition's certificate after ``rounds`` rounds (cached like the server's)."""
        if rounds not in self._coalition_certs:
            acc = self.coalition_accountant.fresh().compose(self.event, max(rounds, 0))
            self._coalition_certs[rounds] = acc.certificate(self.delta)
        return self._coalition_certs[rounds]

    def describe(self) -> dict[str, Any]:
        return {
            "accountant": "secagg_dp.accounting.checkin.mixture"
            + (" (fixed-size, k = m)" if self.fixed else " (binomial mixture)"),
            "method": self.method,
            "method_requested": self.method_requested,
            "methods_compared": self.methods_compared,
            **self._run_keys(),
            "noise_multiplier": self.cfg.privacy.noise_multiplier,
            "target_epsilon": self.cfg.privacy.target_epsilon,
            "calibrated": self.calibration is not None,
            "calibration": self.calibration,
            "gamma": None if self.fixed else self.gamma,
            "sample_size": self.cfg.population.fixed_size if self.fixed else None,
            "event": self.label,
            "ledger": {
                "class": "secagg_dp.accounting.PrivacyLedger",
                "path": None if self.ledger_path is None else self.ledger_path.name,
                "event": self.event.describe(),
                "events": self.rounds,
                "epsilon_budget": self.budget,
            },
            "epsilon": self.epsilon,
            "order": self.order,
            "rounds": self.rounds,
            "planned_epsilon": self.planned_epsilon,
            "certificate": self.certificate,
            "server": self.server_view(self.rounds),
            "coalition": self.coalition_view(self.rounds),
            "per_round_rdp": {"orders": [int(o) for o in self.orders], "values": [float(v) for v in self.round_rdp]},
        }

    def epsilon_after(self, rounds: int) -> tuple[float, int | None, dict[str, Any]]:
        """Certified (epsilon, order, certificate dict) after ``rounds`` rounds, the run's method (no state change)."""
        cert = self.accountant.fresh().compose(self.event, rounds).certificate(self.delta)
        return cert.epsilon, _int_order(cert.order), cert.as_dict(schema="results")

    def server_view(self, rounds: int) -> dict[str, Any]:
        """Certificate against the secure-aggregation server after ``rounds`` rounds (it sees participation)."""
        cert = self._server_cert(rounds)
        post = self.ex_post_accountant.fresh().compose(self.event, max(rounds, 0)).get_epsilon(self.delta)
        return {
            "observer": "server",
            "epsilon": cert.epsilon,
            "order": _int_order(cert.order),
            "method": self.server_method,
            "methods_compared": self.server_methods_compared,
            "certificate": cert.certificate,
            "citation": cert.citation,
            "rounds": rounds,
            "planned_epsilon": self.server_planned_epsilon,
            "sees": "who took part and who dropped, and the aggregate"
            + (
                " (and the noise components it removed: the noise left in the sum is the analyst's)"
                if self.noise is not None
                else ""
            ),
            "ex_post": {
                "epsilon": post,
                "ex_post": True,
                "for": "a client that took part in every one of these rounds",
            },
        }

    def coalition_view(self, rounds: int) -> dict[str, Any]:
        """Certificate against the active server colluding with ``secagg.corrupt_clients`` clients after
        ``rounds`` rounds: the server's view with the base at k_eff(k) = max(1, min(k, m) - c) honest noise
        shares, m = :func:`coalition_min_sum` (the event and method choice as for the server)."""
        cert = self._coalition_cert(rounds)
        c, m = self.coalition.colluders, self.coalition.min_sum
        return {
            "observer": "coalition",
            "epsilon": cert.epsilon,
            "delta": self.delta,
            "order": _int_order(cert.order),
            "method": self.coalition_method,
            "methods_compared": self.coalition_methods_compared,
            "certificate": cert.certificate,
            "citation": cert.citation,
            "rounds": rounds,
            "planned_epsilon": self.coalition_planned_epsilon,
            "colluders": c,
            "min_sum": m,
            "min_sum_rule": self.min_sum_rule,
            "sees": f"what the server sees, and the inputs, noise and keys of {c} colluding client(s); it may "
            f"declare honest clients dropped, down to sums of {m} client(s)",
        }

    def record_round(self) -> tuple[float, int | None]:
        """Spend one round in the ledger (before its aggregate is released); return the certified (epsilon, order).

        Raises :class:`~secagg_dp.errors.PrivacyBudgetExceeded` (ledger and this object unchanged) when the
        round would take the ledger's epsilon above ``privacy.epsilon_budget``.
        """
        t = self.rounds + 1
        eps, order, cert = self.epsilon_after(t)  # compute first: a failure changes nothing
        certified = {"analyst": {"epsilon": eps, "delta": self.delta, "method": self.method, "rounds": t}}
        for obs, method, view in (
            ("server", self.server_method, self._server_cert(t)),
            ("coalition", self.coalition_method, self._coalition_cert(t)),
        ):
            certified[obs] = {"epsilon": view.epsilon, "delta": self.delta, "method": method, "rounds": t}
        self.ledger.spend(self.event, certified=certified)  # the run's certificates, in the charge's transaction
        self.rounds = t
        self.epsilon, self.order, self.certificate = eps, order, cert
        self.outcome_pending = True
        return eps, order

    def record_outcome(self, outcome: str, reason: str = "") -> None:
        """Record on the last charged round what it turned out to be (released / aborted / failed + reason);
        the charge stays (docs/ledger.md, "Outcomes")."""
        if self.rounds and self.outcome_pending:
            self.ledger.record_outcome(outcome, reason)
            self.outcome_pending = False


def _int_order(order: float | None) -> int | None:
    return int(order) if order is not None and math.isfinite(order) else None


def coalition_min_sum(cfg: SimConfig) -> tuple[int, str]:
    """m, the smallest number of clients in a sum the simulated protocol lets finish, and the rule that gave it.

    The honest clients of a round in which N clients checked in enforce the Shamir threshold
    t(N) = ``cfg.secagg.threshold_for(N)`` (the crypto mode builds each client's ``ClientPolicy`` with it as
    ``min_threshold``; its ``min_roster``, the roster an honest server admits, bounds the roster, not the sum).
    A finished sum holds at least t(N) clients: a client refuses to unmask with fewer survivors (full graph,
    Bonawitz et al. 2017 Sec. 6), and under SecAgg+ a self-mask is removed only after t of its k + 1 holders,
    all survivors in the sum, revealed it (Bell et al. 2020). t depends on N, which the active server picks
    (it admits whom it likes to the roster), so the one m of the certificate is the minimum over every N a
    round can have whose round can finish (t(N) <= N): N = max(2, min_roster)..n with check-in, N = round(p n)
    for fixed-size sampling, where min_roster = ``cfg.min_roster`` (``secagg.min_roster`` resolved): every
    honest active client refuses a smaller roster (``ClientPolicy.min_roster``), and the check-in count is at
    least the roster. Conservative (N is taken as both the check-in count that sets t and the roster), and
    data independent.

    m = 1 (the target's own noise only: the coalition can unmask one client's masked input) when the threshold
    does not stop an active server: ``security = "semi-honest"`` (no signed keys, no consistency round), or
    c colluders among the h share holders of a secret with c >= 2t - h for some N (the split-survivor attack
    of :mod:`protocols.security`: t > (h + c)/2 is needed; all c are assumed to be the target's holders).
    m = 1 holds even without the one-sum-per-round consistency check: any number of sums is a function of
    the clients' individual noised inputs, each of which carries its own client's noise share.
    """
    sec, pop = cfg.secagg, cfg.population
    c, n, k = sec.corrupt_clients, pop.clients, sec.neighbours
    if sec.security == "semi-honest":
        return 1, (
            "1: semi-honest clients do not stop an active server (no signed keys, no consistency round), which can "
            "unmask one client's masked input"
        )
    floor = max(2, cfg.min_roster)  # the smallest roster an honest active client accepts
    if pop.sampling == "fixed":
        sizes: range | list[int] = [pop.fixed_size] if pop.fixed_size >= floor else []
    else:
        sizes = range(max(floor, sec.threshold or 2), n + 1)
    # beyond N = 3c + 3 no split is possible (2t - N > N/3 >= c + 1 for t > 2N/3), beyond k + 2 the SecAgg+
    # threshold and holder count are constant, and t(N) is non-decreasing on the full graph: stop there
    stop = max(3 * c + 3, (k or 0) + 2)
    best: tuple[int, int] | None = None  # (t, N)
    for size in sizes:
        t = sec.threshold_for(size)
        if t > size:
            continue  # fewer than t clients checked in: the round aborts
        holders = size if k is None or k >= size - 1 else k + 1
        if min(c, holders - 1) >= 2 * t - holders:
            return 1, (
                f"1: {min(c, holders - 1)} colluders among the {holders} share holders of a secret reach "
                f"2t - h = {2 * t - holders} at N = {size} check-ins (t = {t}), so an active server can unmask one "
                "client's masked input"
            )
        if best is None or t < best[0]:
            best = (t, size)
        if size >= stop:
            break
    if best is None:  # no round can finish: nothing is released beyond K and the flags, any m is valid
        return n, (
            f"{n}: no round can finish (the threshold or the minimum roster {floor} exceeds every possible "
            "check-in count)"
        )
    t, size = best
    return t, (
        f"{t}: the smallest Shamir threshold t(N) the honest clients enforce in a round that can finish "
        f"(secagg.threshold_for(N) over rosters N >= secagg.min_roster = {floor}, least at N = {size})"
    )


def checkin_provider_for(cfg: SimConfig, plan: PlanLike) -> SubsampledCheckin:
    """The check-in accountant's provider for a scenario: the library's
    :func:`~secagg_dp.accounting.checkin.providers.plan_checkin_provider` with the codec's sensitivities of one
    client's vector (client level) or one sample's encoded gradient (``task.name = "logreg"`` with
    ``privacy.unit = "sample"``: S local steps, rate q inside each client)."""
    from secagg_dp.accounting.checkin.providers import plan_checkin_provider

    sample_level = cfg.privacy.unit == "sample"  # config: task 'mean' is client level only
    return plan_checkin_provider(
        plan,
        cfg.population.clients,
        mechanism=cfg.privacy.mechanism,
        local_steps=cfg.task.local_steps if sample_level else None,
        sample_rate=cfg.task.sample_rate if sample_level else 1.0,
    )


def enforced_provider_for(cfg: SimConfig, plan: PlanLike) -> SubsampledCheckin:
    """The per-k provider with add-then-remove noise (``plan.noise``, the parsed ``privacy.noise_enforcement``):
    the library's :func:`~secagg_dp.accounting.checkin.providers.plan_enforced_provider` with target variance in
    the sum mu = K_exp sigma_int^2 (what the expected check-ins add without enforcement), tolerance
    ``privacy.dropout_tolerance``, roster rate r = p (1 - p') (survived advertise_keys) and sum rate gamma."""
    from secagg_dp.accounting.checkin.providers import plan_enforced_provider

    if plan.noise is None:
        raise ConfigError("Config key 'privacy.noise_enforcement' is 'none': there is no enforced provider to build.")
    pop = cfg.population
    return plan_enforced_provider(
        plan,
        plan.noise,
        pop.clients,
        roster_rate=effective_roster_rate(pop.checkin, pop.dropout),
        sum_rate=effective_gamma(pop.checkin, pop.dropout),
    )


def effective_roster_rate(checkin: float, dropout: float) -> float:
    """P(a client is in the roster) = p (1 - p'): it checked in and did not drop at advertise_keys
    (:data:`secagg_dp.stages.ROSTER_DROPOUT_STAGES` stage)."""
    from secagg_dp.accounting.checkin.dropout import effective_checkin_rate
    from secagg_dp.stages import ROSTER_DROPOUT_STAGES

    return effective_checkin_rate(checkin, dropout, ROSTER_DROPOUT_STAGES)


def _provider(cfg: SimConfig, plan: PlanLike) -> tuple[SubsampledCheckin, str]:
    """The per-k provider of the check-in mixture for this config, and a one-line label."""
    if plan.noise is not None:
        from secagg_dp.accounting.checkin.enforced import EnforcedSkellamSum

        provider = enforced_provider_for(cfg, plan)
        enforced = provider.mechanism
        if not isinstance(enforced, EnforcedSkellamSum):  # what plan_enforced_provider builds
            raise TypeError(f"plan_enforced_provider built a {type(enforced).__name__}, not an EnforcedSkellamSum")
        return provider, (
            f"EnforcedSkellamSum(mu={enforced.target_variance:.6g}, tolerance={enforced.tolerance:g}, "
            f"Delta2={enforced.l2_sensitivity:.6g}, Delta1={enforced.l1_sensitivity:.6g}) "
            f"subsampled w/o replacement at k/n, n={cfg.population.clients}, add-then-remove noise"
        )
    if cfg.privacy.unit == "sample":
        return _logreg_provider(cfg, plan)
    n = cfg.population.clients
    provider = checkin_provider_for(cfg, plan)  # replace-one: twice the codec's bounds
    mech = provider.mechanism
    if cfg.task.name == "mean":
        unit = ""
    elif cfg.task.name == "logreg":
        unit = f", one clipped update of {cfg.task.local_steps} local step(s) per client"
    else:  # a user task: whatever it does locally, one clipped row per client leaves the client
        unit = f", one clipped update per client (task {cfg.task.name})"
    return provider, f"{type(mech).__name__}({mech}) subsampled w/o replacement at k/n, n={n}{unit}"


def _logreg_provider(cfg: SimConfig, plan: PlanLike) -> tuple[SubsampledCheckin, str]:
    """Sample-level (add-remove) provider: S local steps inside the check-in mixture.

    Base (k clients): ``LocalStepsDDG`` / ``LocalStepsSkellam`` of ``secagg_dp.accounting.checkin.local_steps``
    (S = 1: joint noise of the k clients; S >= 2: S-fold adaptive composition of the client's own per-step
    noise, Mironov 2017 Prop. 1; Poisson rate q inside each client, Zhu & Wang 2019 Thm 5) with Delta_2,
    Delta_1 of one encoded sample on the grid. Check-in: joint convexity at rate k/n (any unit of privacy)."""
    task, n = cfg.task, cfg.population.clients
    d2 = plan.l2_sensitivity  # add-remove of one sample: one encoded gradient
    provider = checkin_provider_for(cfg, plan)
    base = provider.mechanism
    noise = "joint noise" if task.local_steps == 1 else "own noise per step"
    label = (
        f"{type(base).__name__}(S={task.local_steps}, q={task.sample_rate:g}, sigma_int={plan.sigma_int:.6g}, "
        f"Delta2={d2:.6g}, {noise}) in check-in by joint convexity at k/n, n={n}, add-remove of one sample"
    )
    return provider, label


#: The error the simulator raises when the library's random check-in certificate cannot be imported.
RANDOM_CHECKIN_UNAVAILABLE = "random-checkin accounting not available"


class RandomCheckinSimAccountant(_LedgerOwner):
    """The accountant of ``population.participation = "random-checkin"``: one
    :class:`~secagg_dp.accounting.checkin.random_checkin.RandomCheckinEpoch` per epoch of m rounds, certified by
    :class:`~secagg_dp.accounting.checkin.random_checkin.RandomCheckinAccountant` for the analyst, the server and
    the coalition (random check-ins: Balle, Kairouz, McMahan, Thakkar & Thakurta 2020; the participation the
    simulator runs is the one the certificate assumes, as Chua et al. 2024 require).

    Event: n = ``population.clients``, the run's client-level base (``DDGSum`` / ``SkellamSum`` of
    :func:`checkin_provider_for`, ``replace-one``), m = ``epoch_rounds``, b = ``slots`` and
    gamma = p (1 - p')^3 (:func:`effective_gamma`). With b = 1 this gamma is exact: a client is in the sum of
    round j iff its epoch coin came up, it chose j, and it survived the three stages before the masked input.
    With b > 1 the simulator drops clients per round: a participant is in the sums of a Bin(b, s) subset S of
    its b rounds, s = (1 - p')^3; the event's server bound (1 - gamma) + gamma E[g(M)^b], M ~ Bin(n - 1, gamma),
    g(M) = E f(1 + Bin(M, b / m)), still holds. Given the number N' ~ Bin(n - 1, p) of other participants, their
    thinned slot vectors (a permutation distribution times independent survival coins) are negatively
    associated (Joag-Dev & Proschan 1983, Thm 2.11, P6, P7) and f is non-negative and non-increasing, so
    E[prod_{j in S} f(1 + K'_j) | N'] <= h(N')^|S| with h(N) = E f(1 + Bin(N, s b / m)); averaging over S,
    (1 - s + s h)^b <= 1 - s + s h^b (Jensen), so the moment is <= (1 - p s) + p s E[h(N')^b]; and
    h(N') = E[g(M) | N'] with M ~ Bin(N', s), i.e. M ~ Bin(n - 1, p s), so E[h(N')^b] <= E[g(M)^b] (Jensen).
    Coalition: the same with k_eff. b = 1: gamma is exact. Neighbouring relation: ``replace-one`` of a client's
    whole data; observers: the analyst (the rounds' K and sums; for b = 1 the library's analyst curve, amplified
    by the epoch coin, since the surviving participants are then a uniform subset given the counts; for b > 1
    the server's curve, post-processing), the server
    (also every client's rounds and dropouts), the coalition (the server with ``secagg.corrupt_clients``).

    Epochs are charged before their first round runs (the ledger's event count is the number of epochs
    begun); a partial last epoch is charged as the full epoch whose first rounds it releases
    (post-processing). Method: ``rdp`` (the library's PLD method needs Gaussian bases, which no simulator
    mechanism is); ``privacy.method = "window"`` is refused.
    """

    def __init__(self, cfg: SimConfig, plan: PlanLike, ledger_path: str | Path | None) -> None:
        try:
            from secagg_dp.accounting.checkin.random_checkin import RandomCheckinAccountant, RandomCheckinEpoch
        except ImportError as exc:  # the library part is missing: never fall back to the per-round coin's
            raise ConfigError(
                f"Config key 'population.participation' = 'random-checkin': {RANDOM_CHECKIN_UNAVAILABLE} "
                f"({exc}); the simulator refuses to certify a run with another scheme's accountant."
            ) from exc
        pop = cfg.population
        self.cfg = cfg
        self.orders = ORDERS
        self.delta = cfg.privacy.delta
        self.budget = cfg.privacy.epsilon_budget
        self.method_requested = cfg.privacy.method
        if self.method_requested == "window":
            raise ConfigError(
                "Config key 'privacy.method' = 'window' has no random check-in certificate; use 'rdp' or 'auto'."
            )
        self.method = "rdp"
        self.n, self.m, self.b = pop.clients, pop.epoch_rounds, pop.slots
        self.gamma = effective_gamma(pop.checkin, pop.dropout)
        self.provider, base_label = _provider(cfg, plan)
        self.neighbouring = self.provider.neighbouring
        self.event = RandomCheckinEpoch(self.provider.mechanism, self.n, self.gamma, self.m, self.b, self.neighbouring)
        self.label = f"random check-in epoch (m={self.m}, b={self.b}, gamma={self.gamma:.6g}) of {base_label}"
        min_sum, self.min_sum_rule = coalition_min_sum(cfg)
        self.coalition = Coalition(colluders=cfg.secagg.corrupt_clients, min_sum=min_sum)
        self.accountants = {
            obs: RandomCheckinAccountant(
                self.neighbouring,
                observer=obs,
                method=self.method,
                coalition=self.coalition if obs == "coalition" else None,
                orders=self.orders,
                amplified=self.b == 1,  # b > 1: per-round drops thin a participant's rounds (docstring)
            )
            for obs in ("analyst", "server", "coalition")
        }
        self._certs: dict[tuple[str, int], Certificate] = {}
        self.planned_epochs = self.epochs_for(cfg.rounds)
        try:
            self.epoch_rdp = self.event.rdp(self.orders)
            self.planned = {obs: self.cert(obs, self.planned_epochs).epsilon for obs in self.accountants}
        except ParameterError as exc:
            raise ConfigError(
                f"Config key 'population.participation' = 'random-checkin' cannot be certified for {cfg.rounds} "
                f"rounds: {exc} To fix, add noise (privacy.noise_multiplier) or use fewer rounds."
            ) from exc
        self.planned_epsilon = self.planned["analyst"]
        self.epochs = 0
        self._start(ledger_path)

    @classmethod
    def planned_epsilon_for(cls, cfg: SimConfig, plan: PlanLike, observer: str) -> float:
        """The certificate this accountant reports for ``observer`` (``"analyst"`` | ``"server"`` |
        ``"coalition"``) after the planned ``cfg.rounds`` rounds (the planned epochs), as
        :meth:`SimAccountant.planned_epsilon_for` (what :mod:`simulations.calibrate` evaluates; no ledger file).
        ParameterError where the planned epochs cannot be certified."""
        try:
            acc = cls(cfg, plan, None)
        except ConfigError as exc:
            if isinstance(exc.__cause__, ParameterError):
                raise exc.__cause__ from exc
            raise
        try:
            return float(acc.planned[observer])
        finally:
            acc.close()

    def epochs_for(self, rounds: int) -> int:
        """Epochs begun after ``rounds`` rounds: ceil(rounds / m) (a partial epoch counts as a full one)."""
        return -(-max(rounds, 0) // self.m)

    def cert(self, observer: str, epochs: int) -> Certificate:
        """``observer``'s certificate after ``epochs`` epochs (cached: results.json is rewritten every round)."""
        key = (observer, epochs)
        if key not in self._certs:
            acc = self.accountants[observer].fresh()
            if epochs:
                acc = acc.compose(self.event, epochs)
            self._certs[key] = acc.certificate(self.delta)
        return self._certs[key]

    def _view(self, observer: str, sees: str) -> dict[str, Any]:
        cert = self.cert(observer, self.epochs)
        return {
            "observer": observer,
            "epsilon": cert.epsilon,
            "delta": self.delta,
            "order": _int_order(cert.order),
            "method": self.method,
            "methods_compared": None,
            "certificate": cert.certificate,
            "citation": cert.citation,
            "rounds": self.rounds,
            "epochs": self.epochs,
            "planned_epsilon": self.planned[observer],
            "sees": sees,
        }

    def describe(self) -> dict[str, Any]:
        c, m = self.coalition.colluders, self.coalition.min_sum
        coalition = self._view(
            "coalition",
            f"what the server sees, and the inputs, noise and keys of {c} colluding client(s); it may declare "
            f"honest clients dropped, down to sums of {m} client(s)",
        )
        coalition.update(colluders=c, min_sum=m, min_sum_rule=self.min_sum_rule)
        return {
            "accountant": "secagg_dp.accounting.checkin.random_checkin (random check-ins)",
            "method": self.method,
            "method_requested": self.method_requested,
            "methods_compared": None,
            **self._run_keys(),
            "participation": "random-checkin",
            "noise_multiplier": self.cfg.privacy.noise_multiplier,
            "target_epsilon": self.cfg.privacy.target_epsilon,
            "gamma": self.gamma,
            "epoch_rounds": self.m,
            "slots": self.b,
            "epochs": self.epochs,
            "planned_epochs": self.planned_epochs,
            "sample_size": None,
            "event": self.label,
            "ledger": {
                "class": "secagg_dp.accounting.PrivacyLedger",
                "path": None if self.ledger_path is None else self.ledger_path.name,
                "event": self.event.describe(),
                "events": self.epochs,
                "epsilon_budget": self.budget,
            },
            "epsilon": self.epsilon,
            "order": self.order,
            "rounds": self.rounds,
            "planned_epsilon": self.planned_epsilon,
            "calibrated": self.calibration is not None,
            "calibration": self.calibration,
            "certificate": self.certificate,
            "server": self._view("server", "who took part (every client's rounds) and who dropped, and the aggregate"),
            "coalition": coalition,
            "per_epoch_rdp": {"orders": [int(o) for o in self.orders], "values": [float(v) for v in self.epoch_rdp]},
        }

    def epsilon_after(self, rounds: int) -> tuple[float, int | None, dict[str, Any]]:
        """Certified analyst (epsilon, order, certificate dict) after ``rounds`` rounds (no state change)."""
        cert = self.cert("analyst", self.epochs_for(rounds))
        out = cert.as_dict(schema="results")
        out.update(rounds=rounds, epochs=self.epochs_for(rounds))
        return cert.epsilon, _int_order(cert.order), out

    def record_round(self) -> tuple[float, int | None]:
        """Account the next round: at an epoch's first round spend the epoch in the ledger (before any of its
        rounds is released; a budget refusal raises :class:`~secagg_dp.errors.PrivacyBudgetExceeded` and
        changes nothing); later rounds of the epoch are covered by that charge. Return (epsilon, order)."""
        t = self.rounds + 1
        e = self.epochs_for(t)
        eps, order, cert = self.epsilon_after(t)
        if e > self.epochs:
            certified = {
                obs: {"epsilon": self.cert(obs, e).epsilon, "delta": self.delta, "method": self.method, "rounds": t}
                for obs in self.accountants
            }
            self.ledger.spend(self.event, certified=certified)
            self.epochs = e
            self.outcome_pending = True
        self.rounds = t
        self.epsilon, self.order, self.certificate = eps, order, cert
        return eps, order

    def record_outcome(self, outcome: str, reason: str = "") -> None:
        """Record the outcome of the epoch's first round on its charge (the ledger keeps one outcome per
        charge; the later rounds of the epoch are in results.json's rounds)."""
        if self.epochs and self.outcome_pending:
            self.ledger.record_outcome(outcome, f"epoch {self.epochs}, its first round {self.rounds}: {reason}")
            self.outcome_pending = False


class NoPrivacyAccountant:
    """The accountant of ``privacy.mechanism = "none"`` (the non-private baseline): its certificate is the valid,
    trivial statement epsilon = inf for every observer (the aggregate is a deterministic function of the clients'
    rounded inputs, so no finite epsilon holds at any delta < 1). Nothing is charged to a ledger: a budgeted ledger
    would refuse the first round, so the config refuses ``privacy.epsilon_budget`` with mechanism none, and an
    unbudgeted one would only record inf (no ledger file is written)."""

    def __init__(self, cfg: SimConfig) -> None:
        if cfg.privacy.epsilon_budget is not None:  # the config refuses it; an accountant built by hand too
            raise ConfigError(
                "Config key 'privacy.epsilon_budget' cannot be set with privacy.mechanism = 'none': the run has "
                f"epsilon = inf and a budgeted ledger would refuse its first round "
                f"(not {cfg.privacy.epsilon_budget!r})."
            )
        self.cfg = cfg
        self.delta = cfg.privacy.delta
        self.rounds = 0
        self.epsilon = math.inf
        self.planned_epsilon = math.inf

    def _view(self, observer: str, rounds: int) -> dict[str, Any]:
        return {
            "observer": observer,
            "epsilon": math.inf,
            "epsilon_reason": NO_PRIVACY_REASON,
            "delta": self.delta,
            "certificate": True,  # epsilon = inf is a true (trivial) upper bound
            "rounds": rounds,
            "planned_epsilon": math.inf,
            "planned_epsilon_reason": NO_PRIVACY_REASON,
            "method": None,
            "colluders": self.cfg.secagg.corrupt_clients,
            "min_sum": coalition_min_sum(self.cfg)[0],
        }

    def describe(self) -> dict[str, Any]:
        return {
            "accountant": None,
            "mechanism": NO_NOISE_MECHANISM,
            "method": None,
            "method_requested": self.cfg.privacy.method,
            "neighbouring": None,
            "unit": self.cfg.privacy.unit,
            "noise_enforcement": self.cfg.privacy.noise_enforcement,
            "observer": "analyst",
            "delta": self.delta,
            "event": "no noise: the aggregate of the clients' encoded vectors, released exactly",
            "ledger": None,
            "epsilon": math.inf,
            "epsilon_reason": NO_PRIVACY_REASON,
            "order": None,
            "rounds": self.rounds,
            "planned_epsilon": math.inf,
            "planned_epsilon_reason": NO_PRIVACY_REASON,
            "certificate": self._view("analyst", self.rounds),
            "server": self._view("server", self.rounds),
            "coalition": self._view("coalition", self.rounds),
        }

    def epsilon_after(self, rounds: int) -> tuple[float, int | None, dict[str, Any]]:
        return math.inf, None, self._view("analyst", rounds)

    def record_round(self) -> tuple[float, int | None]:
        """Count the round (nothing is charged: there is no ledger); epsilon stays inf."""
        self.rounds += 1
        return math.inf, None

    def record_outcome(self, outcome: str, reason: str = "") -> None:
        """Nothing to record: no ledger."""

    def attach_ledger(self, path: str | Path) -> None:
        """No ledger is written for a run without noise (its epsilon is inf whatever it records)."""

    def close(self) -> None:
        """Nothing to close."""


NO_NOISE_MECHANISM = "none"


def make_accountant(
    cfg: SimConfig,
    plan: PlanLike,
    ledger_path: str | Path | None = None,
) -> SimAccountant | RandomCheckinSimAccountant | NoPrivacyAccountant:
    """The run's accountant: :class:`NoPrivacyAccountant` for mechanism ``"none"`` (epsilon = inf for every
    participation), else the accountant of the participation the simulator runs:
    :class:`RandomCheckinSimAccountant` for ``population.participation = "random-checkin"``, else
    :class:`SimAccountant` (the per-round coin)."""
    if cfg.privacy.mechanism == NO_NOISE_MECHANISM:
        return NoPrivacyAccountant(cfg)
    if cfg.population.participation == "random-checkin":
        return RandomCheckinSimAccountant(cfg, plan, ledger_path)
    return SimAccountant(cfg, plan, ledger_path)
