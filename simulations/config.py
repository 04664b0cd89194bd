"""Scenario configuration: TOML schema, overrides and validation before any work starts.

A scenario is a TOML file (``simulations/configs/*.toml``) with the sections below; every key is
optional. There is one set of defaults: the bundled ``default.toml``, which is also the scenario
``secagg-dp simulate`` runs without arguments. :data:`DEFAULTS` is read from it (plus the optional keys it
leaves out), so :func:`build_config` and :func:`load_config` start from the same values, shown here (an
empty file runs exactly this scenario, named after the file). Unknown sections or keys, wrong types and
impossible combinations raise one :class:`~secagg_dp.errors.ConfigError` naming the key, before a single
client runs.

.. code-block:: toml

    name = "default"
    mode = "crypto"             # "ideal" (modular sum computed directly) | "crypto" (run_secagg_round)
    rounds = 5
    seed = 0                    # the root seed (recorded in results.json); --seed overrides it
    executor = "inprocess"      # "inprocess" | "dask"
    scheduler = ""              # dask scheduler address; "" starts a LocalCluster
    rng = "aes-counter"         # simulation generator (rounding, noise): "aes-counter" | "pcg64", keyed by the seed

    [population]
    clients = 60                # n
    checkin = 0.5               # p: each client's own check-in coin
    dropout = 0.05              # p': per client and per protocol stage
    sampling = "checkin"        # "checkin" | "fixed" (round(p*n) clients without replacement)
    # participation = "checkin" # "checkin": the coin p every round | "random-checkin" (Balle et al. 2020):
                                # the coin p once per epoch of epoch_rounds rounds, then `slots` of them
    # epoch_rounds = 1          # m, random-checkin only: rounds per epoch (the last epoch may be partial)
    # slots = 1                 # b in 1..m, random-checkin only: distinct rounds per participating client

    [secagg]
    bits = 20                   # q = 2^bits
    threshold_fraction = 0.2    # t = max(2, ceil(fraction * clients each client shares with)) ...
    # threshold = 10            # ... or an absolute t >= 2 (not both)
    # neighbours = 10           # SecAgg+ k-regular graph; omit for the full graph
    security = "active"         # "active" (malicious server; t raised to > 2n/3, or > (k+1)/2 with SecAgg+)
                                # | "semi-honest" (trusted server); see docs/secure-aggregation.md
    corrupt_clients = 0         # c: clients colluding with an active server (privacy.coalition in results.json)
    min_roster = "auto"         # the smallest roster an active client accepts (an int >= 2), or "auto": the
                                # largest N with P(roster < N) <= 1e-3 per round (derived.min_roster)

    [privacy]
    mechanism = "ddg"           # "ddg" (distributed discrete Gaussian) | "skellam"
    clip = 1.0                  # L2 clip c (of a client's vector or update; of one sample for logreg unit "sample")
    noise_multiplier = 4.0      # z: the noise of the expected check-ins sums to std z*c
    k_stddevs = 7.0             # scale rule: k standard deviations fit in Z_q (a wrap below 1e-6 per round here)
    beta = 0.6065306597126334   # conditional rounding parameter, exp(-1/2)
    delta = 1e-5
    method = "auto"             # "auto" (tightest certified) | "rdp" (binomial mixture) | "window" (window certificate)
    # epsilon_budget = 3.0      # optional: the ledger refuses the round that would exceed it (at delta)
    unit = "client"             # "client": clip the whole update, noise once (replace-one of a client);
                                # "sample" (logreg): per-sample clipping and noise at every local step
    noise_enforcement = "none"  # "none" | "add-then-remove" (skellam: the sum keeps the target noise
                                # whatever fraction <= dropout_tolerance of the roster drops)
    dropout_tolerance = 0.1     # D / N, the tolerated fraction of the roster dropping before its input

    [task]
    name = "mean"               # "mean" | "logreg" | "package.module:Class" (any simulations.Task)
    dim = 256                   # mean only: dimension of the client vectors
    # logreg only: local_steps = 1, sample_rate = 0.5, learning_rate = 2.0
    # a user task: local_steps, sample_rate (privacy.unit = "sample") and its constructor keywords:
    # [task.options]            # e.g. hidden = 32 (overrides: task.options.hidden=32)

    [study]                     # optional: a grid of variants, each a full run (default: no grid)
    # grid = { "population.dropout" = [0.0, 0.1, 0.3, 0.5] }
    x = "epsilon"               # plotted x-axis: "epsilon" | "round" (per round) | a swept key (per variant)
    seeds = 1                   # runs per variant, with root seeds seed, seed+1, ...: plots show mean ± std

Overrides (``key=value`` on the command line) use dotted keys, e.g. ``population.dropout=0.3``;
values are parsed as TOML values (``mode="crypto"`` and ``mode=crypto`` both work).
"""

from __future__ import annotations

import copy
import itertools
import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from secagg_dp._validate import check_int, check_real
from secagg_dp.errors import ConfigError

__all__ = [
    "SimConfig",
    "Population",
    "SecAggParams",
    "PrivacyParams",
    "TaskParams",
    "StudyParams",
    "DEFAULTS",
    "load_config",
    "parse_override",
    "apply_overrides",
    "build_config",
    "expand_study",
    "CONFIG_DIR",
    "list_bundled",
    "min_roster_auto",
    "MIN_ROSTER_REFUSAL",
    "NO_NOISE",
    "OBSERVERS",
    "PARTICIPATIONS",
]

#: Values of ``population.participation``: the per-round coin, or random check-ins (Balle et al. 2020).
PARTICIPATIONS = ("checkin", "random-checkin")

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

#: Keys ``default.toml`` leaves out, with their defaults: the optional ones (``None``: unset), the keys of the
#: other task (logreg) and the study (no grid).
_OPTIONAL: dict[str, Any] = {
    "population": {"participation": "checkin", "epoch_rounds": 1, "slots": 1},
    "secagg": {"threshold": None, "neighbours": None},
    "privacy": {"epsilon_budget": None, "target_epsilon": None, "observer": "analyst"},
    "task": {"local_steps": 1, "sample_rate": 0.5, "learning_rate": 2.0, "options": {}},
    "study": {"grid": {}, "x": "epsilon", "seeds": 1},
    "baseline": False,
}

#: ``privacy.mechanism`` = ``"none"``: the non-private baseline (the same codec and rounds, no noise, epsilon = inf)
NO_NOISE = "none"
#: The observers ``privacy.target_epsilon`` can be calibrated against (docs/accounting/observers.md)
OBSERVERS = ("analyst", "server", "coalition")


def _load_defaults() -> dict[str, Any]:
    """The one set of defaults: ``default.toml`` over :data:`_OPTIONAL`."""
    doc = tomllib.loads((CONFIG_DIR / "default.toml").read_text(encoding="utf-8"))
    out = copy.deepcopy(_OPTIONAL)
    for key, val in doc.items():
        if isinstance(val, dict):
            out.setdefault(key, {}).update(val)
        else:
            out[key] = val
    return out


#: Every key with its default: ``default.toml`` (the scenario ``secagg-dp simulate`` runs) plus the optional keys.
DEFAULTS: dict[str, Any] = _load_defaults()

_TASK_KEYS = {"mean": {"name", "dim"}, "logreg": {"name", "local_steps", "sample_rate", "learning_rate"}}
#: Keys of a user task named "package.module:Class": its constructor keywords, and the local steps and Poisson
#: rate the simulator runs at the sample level (privacy.unit = "sample")
_USER_TASK_KEYS = {"name", "options", "local_steps", "sample_rate"}
_LOGREG_DIM = 65 * 10  # 64 pixel features + bias, 10 classes (sklearn digits)
#: Tables whose keys are free (not checked against DEFAULTS): the study grid, a user task's options
_FREE_TABLES = ("grid", "options")


def is_task_path(name: Any) -> bool:
    """Whether ``task.name`` names a user task by import path (``"package.module:Class"``)."""
    return isinstance(name, str) and ":" in name


def _task_keys(name: Any) -> set[str]:
    return _USER_TASK_KEYS if is_task_path(name) else _TASK_KEYS.get(name, set())


def _err(key: str, expected: str, value: Any) -> ConfigError:
    return ConfigError(f"Config key '{key}' must be {expected}, not {value!r}.")


def _int(key: str, v: Any, lo: int | None = None, hi: int | None = None) -> int:
    """The library's integer check (:func:`secagg_dp._validate.check_int`, strict: TOML 7.0 is not 7) as a
    ConfigError naming the config key."""
    return check_int(key, v, lo=lo, hi=hi, strict=True, what="Config key", error=ConfigError)


def _real(key: str, v: Any, lo: float, hi: float = math.inf, *, lo_open: bool = False, hi_open: bool = False) -> float:
    """The library's real-number check (:func:`secagg_dp._validate.check_real`) as a ConfigError."""
    return check_real(
        key,
        v,
        lo=lo,
        hi=None if hi == math.inf else hi,
        lo_open=lo_open,
        hi_open=hi_open,
        what="Config key",
        error=ConfigError,
    )


def _choice(key: str, v: Any, options: tuple[str, ...]) -> str:
    if not isinstance(v, str) or v not in options:
        raise _err(key, "one of " + ", ".join(repr(o) for o in options), v)
    return v


@dataclass(frozen=True)
class Population:
    """Who takes part in a round. ``participation = "checkin"``: every round, each client checks in on its own
    coin p. ``"random-checkin"`` (random check-ins, Balle, Kairouz, McMahan, Thakkar & Thakurta 2020): the
    rounds form epochs of m = ``epoch_rounds`` consecutive rounds; once per epoch each client takes part with
    probability p on its own coin and, if so, picks b = ``slots`` distinct rounds of the epoch uniformly at
    random. When ``rounds`` is not a multiple of m the last epoch is partial: the clients draw their slots
    among all m rounds as in a full epoch and only its first rounds run (a subset of a full epoch's
    releases, so the full epoch the accountant charges bounds it). Dropouts are drawn per round and stage
    either way."""

    clients: int
    checkin: float
    dropout: float
    sampling: str
    participation: str = "checkin"
    epoch_rounds: int = 1
    slots: int = 1

    def __post_init__(self) -> None:
        _int("population.clients", self.clients, 1)
        _real("population.checkin", self.checkin, 0.0, 1.0, lo_open=True)
        _real("population.dropout", self.dropout, 0.0, 1.0, hi_open=True)
        _choice("population.sampling", self.sampling, ("checkin", "fixed"))
        _choice("population.participation", self.participation, PARTICIPATIONS)
        m = _int("population.epoch_rounds", self.epoch_rounds, 1, 10**6)
        _int("population.slots", self.slots, 1)
        if self.participation == "checkin" and (m, self.slots) != (1, 1):
            key = "population.epoch_rounds" if m != 1 else "population.slots"
            raise ConfigError(
                f"Config key {key!r} applies to population.participation = 'random-checkin' only (the coin of "
                f"participation = 'checkin' is drawn every round), not {getattr(self, key.split('.')[1])}."
            )
        _int("population.slots", self.slots, 1, m)  # b distinct rounds of the epoch's m
        if self.participation == "random-checkin" and self.sampling != "checkin":
            raise ConfigError(
                "Config key 'population.sampling' must be 'checkin' with participation = 'random-checkin' (each "
                f"client decides on its own), not {self.sampling!r}."
            )
        if self.sampling == "fixed" and round(self.checkin * self.clients) < 1:
            raise ConfigError(
                f"Config keys 'population.checkin' x 'population.clients' must give at least one sampled client "
                f"for sampling = 'fixed', not round({self.checkin} * {self.clients}) = 0."
            )

    @property
    def fixed_size(self) -> int:
        """Number of clients sampled without replacement when ``sampling = 'fixed'``."""
        return max(1, round(self.checkin * self.clients))

    @property
    def round_rate(self) -> float:
        """P(a given client checks in to a given round): p, or p b / m with random check-ins (each client is
        in b of the m rounds of an epoch with probability p), independently across clients either way."""
        if self.participation == "random-checkin":
            return self.checkin * self.slots / self.epoch_rounds
        return self.checkin

    @property
    def expected_checkins(self) -> float:
        return float(self.fixed_size) if self.sampling == "fixed" else self.round_rate * self.clients


@dataclass(frozen=True)
class SecAggParams:
    bits: int
    threshold_fraction: float | None
    threshold: int | None
    neighbours: int | None
    security: str = "active"
    corrupt_clients: int = 0  # c: clients colluding with an active server (the coalition certificate)
    min_roster: int | str = "auto"  # the smallest roster an active client accepts; "auto": min_roster_auto

    def __post_init__(self) -> None:
        _int("secagg.bits", self.bits, 1, 62)
        _choice("secagg.security", self.security, ("active", "semi-honest"))
        _int("secagg.corrupt_clients", self.corrupt_clients, 0)
        if self.min_roster != "auto" or isinstance(self.min_roster, bool):
            if isinstance(self.min_roster, str):
                raise _err("secagg.min_roster", 'an integer >= 2 or "auto"', self.min_roster)
            _int("secagg.min_roster", self.min_roster, 2)
        if self.threshold is not None and self.threshold_fraction is not None:
            raise ConfigError(
                "Config keys 'secagg.threshold' and 'secagg.threshold_fraction' are exclusive; set one, not both."
            )
        if self.threshold is not None:
            _int("secagg.threshold", self.threshold, 2)
        elif self.threshold_fraction is not None:
            _real("secagg.threshold_fraction", self.threshold_fraction, 0.0, 1.0, lo_open=True)
        else:
            raise ConfigError("Config needs 'secagg.threshold' or 'secagg.threshold_fraction'.")
        if self.neighbours is not None:
            _int("secagg.neighbours", self.neighbours, 2)

    def threshold_for(self, checked_in: int) -> int:
        """The Shamir threshold t for a round in which ``checked_in`` clients take part.

        ``threshold_fraction`` is a fraction of the clients each client shares with: all checked-in
        clients (full graph), or its k neighbours plus itself (SecAgg+). Never below 2 (Shamir needs it), and
        in active mode never below the secure minimum (``protocols.security.min_threshold``: t > 2n/3 on
        the full graph, t > (k + 1)/2 with SecAgg+), to which a smaller configured threshold is raised.
        """
        from protocols.security import min_threshold  # light module; keeps config import cheap

        holders = checked_in if self.neighbours is None else min(self.neighbours, max(checked_in - 1, 1)) + 1
        full = self.neighbours is None or self.neighbours >= checked_in - 1
        floor = min_threshold(max(holders, 1), neighbours=None if full else self.neighbours, security=self.security)
        if self.threshold is not None:
            return max(self.threshold, floor)
        assert self.threshold_fraction is not None  # __post_init__: threshold or threshold_fraction is set
        return max(2, floor, math.ceil(self.threshold_fraction * holders))


@dataclass(frozen=True)
class PrivacyParams:
    mechanism: str
    clip: float
    noise_multiplier: float
    k_stddevs: float
    beta: float
    delta: float
    method: str
    epsilon_budget: float | None = None
    unit: str = "client"  # unit of privacy: "client" (replace-one of a client) or "sample" (add-remove, logreg)
    noise_enforcement: str = "none"  # "none" | "add-then-remove" (docs/noise-enforcement.md)
    dropout_tolerance: float = 0.1  # D / N: dropouts the enforced noise tolerates (add-then-remove)
    # the run's epsilon target at delta for ``observer``: the simulator calibrates noise_multiplier before round 1
    # (simulations.calibrate); None: noise_multiplier as given
    target_epsilon: float | None = None
    observer: str = "analyst"  # whose certificate target_epsilon is met for: "analyst" | "server" | "coalition"

    def __post_init__(self) -> None:
        from secagg_dp.noise.add_then_remove import NOISE_ENFORCEMENTS  # the library's names (imported lazily)
        from secagg_dp.plan import MECHANISMS

        _choice("privacy.unit", self.unit, ("client", "sample"))
        _choice("privacy.noise_enforcement", self.noise_enforcement, NOISE_ENFORCEMENTS)
        _real("privacy.dropout_tolerance", self.dropout_tolerance, 0.0, 1.0, hi_open=True)
        _choice("privacy.mechanism", self.mechanism, (*MECHANISMS, NO_NOISE))
        _real("privacy.clip", self.clip, 0.0, lo_open=True)
        if isinstance(self.noise_multiplier, int | float) and self.noise_multiplier == 0:
            raise ConfigError(
                "Config key 'privacy.noise_multiplier' must be > 0 (it sets the noise and, for every mechanism, the "
                "codec's scale), not 0. For a run without noise set privacy.mechanism = 'none' (the same codec and "
                "rounds, no noise, epsilon = inf), keeping a noise multiplier > 0 for the scale."
            )
        _real("privacy.noise_multiplier", self.noise_multiplier, 0.0, lo_open=True)
        _real("privacy.k_stddevs", self.k_stddevs, 0.0, lo_open=True)
        _real("privacy.beta", self.beta, 0.0, 1.0, hi_open=True)
        _real("privacy.delta", self.delta, 0.0, 1.0, lo_open=True, hi_open=True)
        _choice("privacy.method", self.method, ("auto", "rdp", "window"))
        if self.epsilon_budget is not None:
            _real("privacy.epsilon_budget", self.epsilon_budget, 0.0, lo_open=True)
        _choice("privacy.observer", self.observer, OBSERVERS)
        if self.target_epsilon is not None:
            _real("privacy.target_epsilon", self.target_epsilon, 0.0, lo_open=True, hi_open=True)
        if self.mechanism == NO_NOISE:
            for key, val in (("epsilon_budget", self.epsilon_budget), ("target_epsilon", self.target_epsilon)):
                if val is not None:
                    raise ConfigError(
                        f"Config key 'privacy.{key}' cannot be set with privacy.mechanism = 'none': a run without "
                        f"noise has epsilon = inf, which no budget or target admits (not {val!r}). To fix, remove "
                        f"privacy.{key}, or compare with a private run via baseline = true."
                    )


@dataclass(frozen=True)
class TaskParams:
    name: str
    dim: int
    local_steps: int
    sample_rate: float
    learning_rate: float
    options: dict[str, Any] = field(default_factory=dict)  # a user task's constructor keywords

    def __post_init__(self) -> None:
        if not is_task_path(self.name):
            _choice("task.name", self.name, (*_TASK_KEYS, "package.module:Class"))
        if not isinstance(self.options, dict):
            raise _err("task.options", "a table of constructor keywords", self.options)
        _int("task.dim", self.dim, 1, 1 << 24)
        _int("task.local_steps", self.local_steps, 1, 1000)
        _real("task.sample_rate", self.sample_rate, 0.0, 1.0, lo_open=True)
        _real("task.learning_rate", self.learning_rate, 0.0, lo_open=True)

    @property
    def vector_dim(self) -> int | None:
        """Length of the real vector each client encodes (None for a user task: its own ``vector_dim``)."""
        if is_task_path(self.name):
            return None
        return self.dim if self.name == "mean" else _LOGREG_DIM


@dataclass(frozen=True)
class StudyParams:
    grid: dict[str, list[Any]] = field(default_factory=dict)
    x: str = "epsilon"
    seeds: int = 1

    def __post_init__(self) -> None:
        _int("study.seeds", self.seeds, lo=1, hi=100)
        if not isinstance(self.grid, dict):
            raise _err("study.grid", "a table of key = [values]", self.grid)
        for k, v in self.grid.items():
            if k.startswith("study") or (k not in _ALL_KEYS and not k.startswith("task.options.")):
                raise ConfigError(f"Config key 'study.grid' names unknown or unsweepable key {k!r}.")
            if not isinstance(v, list) or not v:
                raise _err(f"study.grid.{k}", "a non-empty list of values", v)
        if not isinstance(self.x, str) or (
            self.x not in ("epsilon", "round") and self.grid and self.x not in self.grid
        ):
            raise _err("study.x", "'epsilon', 'round' or a key of study.grid", self.x)


@dataclass(frozen=True)
class SimConfig:
    """A validated scenario. Build it with :func:`build_config` (from a dict) or :func:`load_config`."""

    name: str
    mode: str
    rounds: int
    seed: int | None
    executor: str
    scheduler: str
    population: Population
    secagg: SecAggParams
    privacy: PrivacyParams
    task: TaskParams
    study: StudyParams
    rng: str = "aes-counter"  # the simulation generator of client blocks (see simulations.clients.block_rng)
    # run the same seeded scenario a second time with privacy.mechanism = "none" and record it beside this one
    baseline: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise _err("name", "a non-empty string", self.name)
        _choice("mode", self.mode, ("ideal", "crypto"))
        _int("rounds", self.rounds, 1, 10**6)
        if self.seed is not None:
            _int("seed", self.seed, 0, 2**63 - 1)
        _choice("executor", self.executor, ("inprocess", "dask"))
        if not isinstance(self.scheduler, str):
            raise _err("scheduler", "a string (address) or ''", self.scheduler)
        _choice("rng", self.rng, ("aes-counter", "pcg64"))
        if not isinstance(self.baseline, bool):
            raise _err("baseline", "true or false", self.baseline)
        if self.baseline and self.privacy.mechanism == NO_NOISE:
            raise ConfigError(
                "Config key 'baseline' = true needs a private run to compare with: privacy.mechanism is 'none' "
                "already. To fix, set privacy.mechanism to 'ddg' or 'skellam', or baseline = false."
            )
        self._check_combination()

    def _check_combination(self) -> None:
        n = self.population.clients
        t = self.secagg.threshold
        if t is not None and t > n:
            raise ConfigError(f"Config key 'secagg.threshold' must be <= population.clients = {n}, not {t}.")
        c = self.secagg.corrupt_clients
        if c >= n:
            raise ConfigError(
                f"Config key 'secagg.corrupt_clients' must be < population.clients = {n} (at least one client is "
                f"honest: the one the certificate protects), not {c}."
            )
        r = self.secagg.min_roster
        if r != "auto" and isinstance(r, int) and r > n:
            raise ConfigError(
                f"Config key 'secagg.min_roster' must be <= population.clients = {n} (no roster is larger), not {r}."
            )
        k = self.secagg.neighbours
        if k is not None and k >= n:
            raise ConfigError(f"Config key 'secagg.neighbours' must be < population.clients = {n}, not {k}.")
        if k is not None and t is not None and t > k + 1:
            raise ConfigError(
                f"Config key 'secagg.threshold' must be <= secagg.neighbours + 1 = {k + 1} (SecAgg+), not {t}."
            )
        if self.population.sampling == "fixed" and self.population.dropout > 0:
            raise ConfigError(
                "Config key 'population.dropout' must be 0 with sampling = 'fixed': the without-replacement "
                f"accountant covers a fixed number of noise shares, not {self.population.dropout}."
            )
        if self.population.participation == "random-checkin" and (
            self.privacy.unit != "client" or self.privacy.noise_enforcement != "none"
        ):
            raise ConfigError(
                "Config key 'population.participation' = 'random-checkin' needs privacy.unit = 'client' and "
                "privacy.noise_enforcement = 'none' (the random check-in certificate has client-level bases only)."
            )
        if self.task.name == "mean" and self.privacy.unit != "client":
            raise ConfigError(
                "Config key 'privacy.unit' must be 'client' for task 'mean' (one vector per client), "
                f"not {self.privacy.unit!r}."
            )
        if self.privacy.noise_enforcement == "add-then-remove":
            from secagg_dp.plan import Mechanism

            if self.privacy.mechanism == NO_NOISE:
                raise ConfigError(
                    "Config key 'privacy.noise_enforcement' must be 'none' with privacy.mechanism = 'none' (there is "
                    "no noise to enforce), not 'add-then-remove'."
                )

            if not Mechanism(self.privacy.mechanism).infinitely_divisible:
                raise ConfigError(
                    "Config key 'privacy.mechanism' must be 'skellam' with noise_enforcement = 'add-then-remove' "
                    f"(the discrete Gaussian is not infinitely divisible), not {self.privacy.mechanism!r}."
                )
            if self.privacy.unit != "client" or self.population.sampling != "checkin":
                raise ConfigError(
                    "Config key 'privacy.noise_enforcement' = 'add-then-remove' needs privacy.unit = 'client' and "
                    "population.sampling = 'checkin' (one noise draw per client and round)."
                )
        if self.task.name == "mean" and self.task.local_steps != 1:
            raise ConfigError("Config key 'task.local_steps' applies to task 'logreg' only; task 'mean' has one step.")
        if is_task_path(self.task.name) and self.privacy.unit == "client" and self.task.local_steps != 1:
            raise ConfigError(
                "Config key 'task.local_steps' applies to privacy.unit = 'sample' for a user task (at the client "
                f"level the task runs its own local steps inside client_vectors), not {self.task.local_steps}."
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def min_roster(self) -> int:
        """``secagg.min_roster`` resolved: the integer given, or with ``"auto"`` :func:`min_roster_auto` of the
        population (the smallest roster every simulated client accepts; active clients enforce it)."""
        r = self.secagg.min_roster
        return min_roster_auto(self.population) if r == "auto" else int(r)


#: The per-round probability with which ``secagg.min_roster = "auto"`` lets an honest round be refused.
MIN_ROSTER_REFUSAL = 1e-3


def min_roster_auto(pop: Population, refusal: float = MIN_ROSTER_REFUSAL) -> int:
    """The largest N >= 2 with P(R < N) <= ``refusal``, R the roster of an honest round.

    The roster is the clients that checked in and did not drop at ``advertise_keys``: every client
    independently checks in (probability p) and then drops at that stage with probability p', so
    R ~ Bin(n, p (1 - p')) with ``sampling = "checkin"`` (p b / m in place of p with random check-ins: a
    client is in a given round with probability p b / m, independently of the others), and
    R ~ Bin(round(p n), 1 - p') with ``sampling = "fixed"`` (whose dropout is 0: R = round(p n)). A client that
    insists on R >= N refuses an honest round with probability P(R < N) <= ``refusal`` (the per-round abort
    rate this rule adds; the largest such N is the strongest floor at that rate). The client needs only the
    deployment's own parameters (n, p, p', and m, b with random check-ins), never the round's outcome. At
    least 2 (Shamir needs two holders; when even P(R < 2) exceeds ``refusal`` the floor is 2 and adds no
    abort beyond the threshold's).

    P(R < N) = sum_{r < N} P(R = r) in log space (Loader 2000's saddle-point pmf,
    :func:`secagg_dp.accounting.checkin.tails.log_binom_pmf`) on a window of r below the mean, plus a rigorous
    upper bound on the mass below the window (:func:`~secagg_dp.accounting.checkin.tails.log_binom_tail_ub`):
    an upper bound up to rounding, so the rate holds.
    """
    import numpy as np

    check_real("refusal", refusal, lo=0.0, hi=0.5, lo_open=True, hi_open=True)
    from secagg_dp.accounting.checkin.tails import log_binom_pmf, log_binom_tail_ub

    if pop.sampling == "fixed":
        trials, q = pop.fixed_size, 1.0 - pop.dropout
    else:
        trials, q = pop.clients, pop.round_rate * (1.0 - pop.dropout)
    if q >= 1.0:
        return max(2, trials)
    mean = trials * q
    # the window [lo, hi): every N the answer can be is <= hi (P(R < N) > 1/2 > refusal beyond the median)
    hi = min(trials, math.floor(mean) + 2)
    lo = max(0, math.floor(mean - 60.0 * math.sqrt(mean * (1.0 - q)) - 60.0))
    below = -np.inf
    if lo > 0:
        below = float(log_binom_tail_ub(trials, np.zeros(1), np.array([lo - 1.0]), q)[0])
    r = np.arange(lo, hi, dtype=np.float64)
    pmf = np.exp(log_binom_pmf(trials, r, q))
    cdf = math.exp(below) + np.cumsum(pmf)  # cdf[i] = P(R <= lo + i) (an upper bound)
    ok = np.flatnonzero(cdf <= refusal)  # P(R < N) <= refusal for N = lo + i + 1
    if ok.size == 0:  # not even P(R < lo + 1) is within the rate: no floor above Shamir's 2
        return 2
    return max(2, lo + int(ok[-1]) + 1)


def _flat_keys(doc: dict[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for k, v in doc.items():
        if isinstance(v, dict) and k not in _FREE_TABLES:
            keys |= _flat_keys(v, f"{prefix}{k}.")
        else:
            keys.add(prefix + k)
    return keys


_ALL_KEYS = _flat_keys(DEFAULTS)


def _merge(base: dict[str, Any], raw: dict[str, Any], where: str = "") -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, val in raw.items():
        full = f"{where}{key}"
        if key not in base:
            known = ", ".join(sorted(base))
            raise ConfigError(
                f"Unknown config key '{full}'. Known keys{' in [' + where[:-1] + ']' if where else ''}: {known}."
            )
        if isinstance(base[key], dict) and key not in _FREE_TABLES:
            if not isinstance(val, dict):
                raise _err(full, "a table", val)
            out[key] = _merge(base[key], val, f"{full}.")
        else:
            out[key] = val
    return out


def build_config(
    raw: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
    *,
    base: dict[str, Any] | None = None,
) -> SimConfig:
    """Validate layers into a :class:`SimConfig`: :data:`DEFAULTS`, then ``base``, ``raw`` (parsed TOML
    documents), then the ``key=value`` overrides in order; a later layer wins.

    Setting one of the exclusive keys ``secagg.threshold`` / ``secagg.threshold_fraction`` in a layer
    clears the other one set by an earlier layer; setting ``task.name`` drops the task keys earlier layers
    set (they belong to the other task). A task key that does not apply to the final task is an error
    only when given at or after the layer that chose the task.
    """
    layers = [_flatten(_checked(base or {})), _flatten(_checked(raw or {}))]
    layers.append({k: v for k, v in (parse_override(o) for o in overrides or [])})
    merged = copy.deepcopy(DEFAULTS)
    task_keys: set[str] = set()
    for layer in layers:
        if layer.get("secagg.threshold") is not None and "secagg.threshold_fraction" not in layer:
            merged["secagg"]["threshold_fraction"] = None
        if layer.get("secagg.threshold_fraction") is not None and "secagg.threshold" not in layer:
            merged["secagg"]["threshold"] = None
        if "task.name" in layer:
            merged["task"] = copy.deepcopy(DEFAULTS["task"])
            task_keys = set()
        for key, val in layer.items():
            _set(merged, key, val)
            if key.startswith("task.") and key != "task.name":
                task_keys.add(key.split(".")[1])
    task = merged["task"]
    used = _task_keys(task.get("name"))
    stray = sorted(task_keys - used)
    if used and stray:
        raise ConfigError(
            f"Config key 'task.{stray[0]}' does not apply to task {task['name']!r} (its keys: {sorted(used)})."
        )
    try:
        return _build(merged, merged["study"])
    except TypeError as exc:  # a dataclass got a key it does not know (cannot happen after _merge) or bad shape
        raise ConfigError(f"Invalid config: {exc}") from exc


def _build(doc: dict[str, Any], study: dict[str, Any]) -> SimConfig:
    """The :class:`SimConfig` of a merged config document (every table present) with the study table ``study``
    (the tables built in their order, so the first bad one is the one reported)."""
    return SimConfig(
        name=doc["name"],
        mode=doc["mode"],
        rounds=doc["rounds"],
        seed=doc["seed"],
        executor=doc["executor"],
        scheduler=doc["scheduler"],
        population=Population(**doc["population"]),
        secagg=SecAggParams(**doc["secagg"]),
        privacy=PrivacyParams(**doc["privacy"]),
        task=TaskParams(**doc["task"]),
        study=StudyParams(**study),
        rng=doc["rng"],
        baseline=doc["baseline"],
    )


def _checked(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` after checking every key and table against :data:`DEFAULTS` (unknown keys are errors)."""
    _merge(DEFAULTS, raw)
    return raw


def _flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of a (checked) config document; ``study.grid`` stays one value."""
    out: dict[str, Any] = {}
    for k, v in doc.items():
        if isinstance(v, dict) and k not in _FREE_TABLES:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key=value`` (value as a TOML value; a bare word is taken as a string)."""
    if "=" not in text:
        raise ConfigError(f"Override must look like key=value (e.g. population.dropout=0.3), not {text!r}.")
    key, value = (s.strip() for s in text.split("=", 1))
    if key not in _ALL_KEYS and not (key.startswith("task.options.") and len(key) > len("task.options.")):
        raise ConfigError(
            f"Unknown config key '{key}' in override {text!r}. Known keys: {', '.join(sorted(_ALL_KEYS))}."
        )
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key, parsed


def apply_overrides(doc: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``doc`` with dotted ``key=value`` overrides applied."""
    out = copy.deepcopy(doc)
    for text in overrides:
        key, val = parse_override(text)
        _set(out, key, val)
    return out


def _set(doc: dict[str, Any], key: str, val: Any) -> None:
    parts = key.split(".")
    node = doc
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = val


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> SimConfig:
    """Load a TOML scenario (a path, or a bare name of a file in ``simulations/configs``).

    Every key a file leaves out takes its value from the bundled ``default.toml`` (the documented scenario
    ``secagg-dp simulate`` runs without arguments), so an empty file runs exactly that scenario; the
    scenario's name defaults to the file's stem. ``None`` loads ``default.toml`` itself.
    """
    default_doc = _read_toml(CONFIG_DIR / "default.toml")
    if path is None:
        return build_config(default_doc, overrides)
    p = Path(path)
    if not p.exists() and (CONFIG_DIR / f"{path}.toml").exists():
        p = CONFIG_DIR / f"{path}.toml"
    if not p.exists():
        raise ConfigError(f"Config file {str(path)!r} does not exist (bundled: {', '.join(list_bundled())}).")
    if p.is_dir():
        raise ConfigError(f"Config file {str(path)!r} is a directory, not a TOML file.")
    raw = _read_toml(p)
    if p.resolve() == (CONFIG_DIR / "default.toml").resolve():
        return build_config(raw, overrides)
    raw.setdefault("name", p.stem)
    return build_config(raw, overrides, base=default_doc)


def _read_toml(p: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"Config file {str(p)!r} is not valid TOML: {exc}.") from exc
    except OSError as exc:
        raise ConfigError(f"Config file {str(p)!r} cannot be read: {exc}.") from exc


def list_bundled() -> list[str]:
    return sorted(f.stem for f in CONFIG_DIR.glob("*.toml"))


def expand_study(cfg: SimConfig) -> list[tuple[str, dict[str, Any], SimConfig]]:
    """Expand the study grid into (label, {key: value}, config) variants, each validated up front."""
    grid = cfg.study.grid
    if not grid:
        return [(cfg.name, {}, cfg)]
    keys = list(grid)
    base = cfg.as_dict()
    base["study"] = {"grid": {}, "x": cfg.study.x, "seeds": 1}
    if base["secagg"]["threshold"] is not None:
        base["secagg"]["threshold_fraction"] = None
    variants = []
    for combo in itertools.product(*(grid[k] for k in keys)):
        doc = copy.deepcopy(base)
        for k, v in zip(keys, combo, strict=True):
            _set(doc, k, v)
        label = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in zip(keys, combo, strict=True))
        doc["name"] = f"{cfg.name}[{label}]"
        try:
            variant = _build(doc, {"grid": {}, "x": cfg.study.x, "seeds": 1})
        except ConfigError as exc:
            raise ConfigError(f"Study variant {label}: {exc}") from exc
        variants.append((label, dict(zip(keys, combo, strict=True)), variant))
    return variants
