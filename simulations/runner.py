"""Run a scenario round by round: check-in, dropouts, encode + noise, aggregate, account, decode, update.

One round: the server opens round r; each of the n clients checks in by its own coin p (or, for
the comparison study, exactly round(p n) clients are sampled without replacement); dropouts are drawn per
client and per protocol stage with probability p'; every participant computes its update, clips, encodes
onto Z_q, adds discrete Gaussian or Skellam noise; the vectors go through the real protocol (``crypto``) or
the ideal aggregator (``ideal``); the privacy ledger records the round (committed before anything is
released; a budget refusal stops the run with status "budget_exhausted") and the accountant reports the
certified epsilon so far; the server decodes the modular sum and updates the model. ``results.json`` is
rewritten atomically after every round.
"""

from __future__ import annotations

import contextlib
import math
import platform
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from secagg_dp import zq
from secagg_dp.errors import AbortError, ConfigError, ParameterError, ProtocolError
from secagg_dp.noise import SIGMA_MAX
from simulations import aggregators
from simulations.clients import (
    BLOCK,
    PURPOSE_CHECKIN,
    PURPOSE_CRYPTO,
    PURPOSE_DROPOUT,
    PURPOSE_ROTATION,
    BlockInputs,
    RoundSpec,
    block_inputs,
    blocks_of,
    chunks_of,
    client_truth,
    make_codec,
    noise_rng,
    run_blocks,
)
from simulations.config import SimConfig
from simulations.results import METRICS_NOTE, SCHEMA, write_atomic
from simulations.tasks import LogRegTask, MeanTask, make_task
from simulations.tasks.protocol import call_task, check_server_update, finite_metrics, task_description

__all__ = [
    "Plan",
    "plan",
    "run_scenario",
    "RoundRecord",
    "RoundAggregate",
    "aggregate_round",
    "aggregate_both_modes",
    "SEED_DERIVATION",
    "SIGMA_INT_MAX",
]

#: Largest per-client grid noise std the simulator uses: the range of ``sample_discrete_gaussian``
#: (sigma in (0, 1e6]) and of ``sample_skellam`` (variance in (0, 1e12]); a test ties it to the samplers.
SIGMA_INT_MAX = SIGMA_MAX

SEED_DERIVATION = (
    "numpy SeedSequence(root, spawn_key=...): data (0, ...) [mean: PCG64 of (0, 1), client i from draw i*2^70]; "
    "round r check-in (1, r, 0), dropouts (1, r, 1) [PCG64], public rotation seed (1, r, 2), protocol seed "
    "(1, r, 3), participant block b (1, r, 4, b) [config 'rng': AES-CTR (randomgen AESCounter) or PCG64], "
    "ideal mode: the included clients' noise summed as one draw (1, r, 5) [config 'rng'] where exact "
    "(Skellam) or within total variation 2^-60 (discrete Gaussian), else per client in the blocks; "
    "logreg client-level local minibatches of client i in round r (2, r, i)"
)
_DRAW_CHUNK = 1 << 20  # check-in coins drawn per call: bounded memory at n = 10^7 (same stream as one call)


@dataclass(frozen=True)
class Plan:
    """Quantities derived from a config before any work: the codec scale and the noise on the grid."""

    dim: int
    padded_dim: int
    expected_checkins: float
    scale_clients: int
    signal_norm: float  # per-client L2 norm the scale rule budgets for (c, or S*q*m*C for logreg)
    sigma_local: float  # per-client noise std in original units (per step for logreg unit "sample")
    sigma_int: float  # the same on the integer grid (sigma_local * scale)
    scale: float
    scale_rule: float  # the k-stddev scale before the sampler-range cap (``scale`` <= this)
    scale_capped: bool  # True when SIGMA_INT_MAX / sigma_local < scale_rule (see plan())
    l2_sensitivity: float  # Delta_2 of one encoded vector (one client, or one sample for logreg unit "sample")
    l1_sensitivity: float
    shard_size: int | None
    wrap_probability_bound: float | None
    # secagg.min_roster resolved (SimConfig.min_roster): the smallest roster every active client accepts
    min_roster: int = 2

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_task(cfg: SimConfig, task: Any = None) -> Any:
    """The run's task: ``task`` if given (any :class:`simulations.Task`), else the one the config names."""
    return make_task(cfg) if task is None else task


def plan(cfg: SimConfig, root_seed: int = 0, task: Any = None) -> Plan:
    """Derive the codec scale and noise; raise one ConfigError if the bit width cannot carry the sum.

    ``task`` (default: the config's) is checked first (:func:`simulations.tasks.check_task`: the protocol,
    ``vector_dim``, and the rows of ``client_vectors`` for a few clients of round 1): a malformed task is
    refused with one ParameterError naming it, before any round."""
    pop, priv, task_cfg = cfg.population, cfg.privacy, cfg.task
    n_exp = pop.expected_checkins
    if pop.sampling == "fixed":
        n_scale = pop.fixed_size
    else:  # a high-probability upper bound on the number of participants K ~ Bin(n, p)
        n_scale = min(pop.clients, math.ceil(n_exp + 4.0 * math.sqrt(n_exp * (1.0 - pop.checkin)) + 1.0))
    sigma_local = priv.noise_multiplier * priv.clip / math.sqrt(n_exp)
    task = resolve_task(cfg, task)
    from simulations.tasks.protocol import check_task

    check_task(task, root_seed=root_seed, clients=pop.clients, unit=priv.unit)
    shard = int(task.shard_size(root_seed)) if callable(getattr(task, "shard_size", None)) else None
    if priv.unit == "client":  # the clipped update, noised once
        signal, sigma_total = priv.clip, sigma_local
    else:
        assert shard is not None  # check_task: a sample-level task has shard_size
        signal = task_cfg.local_steps * task_cfg.sample_rate * shard * priv.clip
        sigma_total = sigma_local * math.sqrt(task_cfg.local_steps)
    dim = int(task.vector_dim)
    from secagg_dp.quantize import ZqCodec
    from secagg_dp.quantize.scale import sampler_capped_scale

    try:
        scale = ZqCodec.scale_for(
            bits=cfg.secagg.bits,
            n_clients=n_scale,
            clip=signal,
            dim=dim,
            sigma=sigma_total,
            k=priv.k_stddevs,
            beta=priv.beta,
        )
    except ParameterError as exc:
        raise ConfigError(
            f"Config key 'secagg.bits' = {cfg.secagg.bits} is too small for up to {n_scale} clients of dimension "
            f"{dim} (clip {signal:g}, noise std {sigma_total:.4g}, k = {priv.k_stddevs:g}): {exc}"
        ) from exc
    scale_rule = scale
    # Sampler range: the grid noise std is capped at SIGMA_INT_MAX (secagg_dp.quantize.sampler_capped_scale)
    scale, inflation = sampler_capped_scale(
        scale, sigma=sigma_local, clip=priv.clip, dim=dim, beta=priv.beta, sigma_int_max=SIGMA_INT_MAX
    )
    capped = inflation is not None
    if inflation is not None and inflation > 2.0:  # the same criterion ZqCodec.scale_for applies uncapped
        raise ConfigError(
            f"Config key 'privacy.noise_multiplier' = {priv.noise_multiplier:g} is too large for the samplers: "
            f"the grid noise std is capped at {SIGMA_INT_MAX:g}, which leaves scale {scale:.4g} and rounding "
            f"inflates the L2 sensitivity by x{inflation:.3g} (> 2). To fix, lower the noise multiplier or clip."
        )
    codec = ZqCodec(dim, cfg.secagg.bits, priv.clip, scale, rotation_seed=0, beta=priv.beta)
    from secagg_dp.quantize import wrap_around_bound

    # P(some coordinate of the aggregate wraps) for the budgeted signal and noise (codec's sub-Gaussian bound)
    wrap = float(
        wrap_around_bound(
            bits=cfg.secagg.bits,
            scale=scale,
            clip=signal,
            dim=dim,
            n_clients=n_scale,
            sigma=sigma_total,
            beta=priv.beta,
        ).any_coordinate
    )
    return Plan(
        dim=dim,
        padded_dim=codec.padded_dim,
        expected_checkins=n_exp,
        scale_clients=n_scale,
        signal_norm=signal,
        sigma_local=sigma_local,
        sigma_int=min(sigma_local * scale, SIGMA_INT_MAX),
        scale=scale,
        scale_rule=scale_rule,
        scale_capped=capped,
        l2_sensitivity=float(codec.l2_sensitivity),
        l1_sensitivity=float(codec.l1_sensitivity),
        shard_size=shard,
        wrap_probability_bound=wrap,
        min_roster=cfg.min_roster,
    )


@dataclass
class RoundRecord:
    round: int
    checked_in: int
    included: int
    threshold: int
    dropped: dict[str, int]
    aborted: bool
    epsilon: float
    order: float | None
    metrics: dict[str, float]
    seconds: dict[str, float]
    communication: dict[str, Any] | None = None  # crypto mode: bytes per client (see communication_record)


def communication_record(comm: Any, dim: int, bits: int) -> dict[str, Any]:
    """A round's ``communication`` object for results.json: bytes per participating client, all stages
    (``upload_bytes_mean``/``_max``, ``download_bytes_mean``/``_max``), ``raw_bytes`` = ceil(d bits / 8) of
    the unmasked vector, the ``clients`` counted and the per-stage breakdown ``stages``.

    ``comm`` is the round's :class:`protocols.communication.Communication`."""
    out = comm.summary()
    stages = out.pop("stages")
    return {**out, "raw_bytes": -(-dim * bits // 8), "stages": stages}


def summarise_communication(records: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The run's ``communication`` summary over its measured rounds: means weighted by each round's
    participating clients (bytes per client per round), maxima over rounds; ``None`` if no round was measured."""
    recs = [r for r in records if r]
    if not recs:
        return None
    weights = np.asarray([r["clients"] for r in recs], dtype=float)

    def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in parts[0]:
            vals = [p[key] for p in parts]
            if key.endswith("_mean"):
                out[key] = float(np.dot(weights, vals) / weights.sum()) if weights.sum() else 0.0
            elif key.endswith("_max"):
                out[key] = int(max(vals))
        return out

    stages = list(dict.fromkeys(s for r in recs for s in r["stages"]))
    zero = dict.fromkeys(("upload_bytes_mean", "upload_bytes_max", "download_bytes_mean", "download_bytes_max"), 0)
    return {
        **combine(recs),
        "raw_bytes": recs[-1]["raw_bytes"],
        "rounds": len(recs),
        "clients_mean": float(weights.mean()),
        "stages": {s: combine([r["stages"].get(s, zero) for r in recs]) for s in stages},
    }


def _round_rng(root: int, r: int, purpose: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(root, spawn_key=(1, r, purpose)))


def _round_int(root: int, r: int, purpose: int) -> int:
    words = np.random.SeedSequence(root, spawn_key=(1, r, purpose)).generate_state(2, np.uint32)
    return (int(words[0]) | (int(words[1]) << 32)) >> 1  # a 63-bit non-negative integer


def select_participants(cfg: SimConfig, root: int, r: int) -> np.ndarray:
    """Sorted int64 ids: check-in by each client's own coin p, or fixed-size sampling without replacement."""
    rng = _round_rng(root, r, PURPOSE_CHECKIN)
    n = cfg.population.clients
    if cfg.population.sampling == "fixed":
        return np.sort(rng.choice(n, size=cfg.population.fixed_size, replace=False).astype(np.int64))
    parts = [
        lo + np.flatnonzero(rng.random(min(_DRAW_CHUNK, n - lo)) < cfg.population.checkin)
        for lo in range(0, n, _DRAW_CHUNK)
    ]
    return np.concatenate(parts).astype(np.int64)


def software_info() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ver = version("secagg-dp")
    except PackageNotFoundError:  # running from a source tree
        ver = "unknown"
    return {"secagg_dp": ver, "python": platform.python_version(), "numpy": np.__version__}


def run_scenario(
    cfg: SimConfig,
    out_dir: str | Path,
    *,
    executor: Any = None,
    accountant: Any = None,
    progress: bool = False,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    task: Any = None,
) -> dict[str, Any]:
    """Run every round of ``cfg``, writing ``out_dir/results.json`` after each; return the document.

    ``task`` is any object satisfying :class:`simulations.Task` (default: the task the config names); it is
    checked before any work (see :func:`plan`). The simulator clips every row it returns to ``privacy.clip``.
    ``accountant`` defaults to :func:`simulations.privacy.make_accountant` (ledger in ``out_dir``);
    ``executor`` to the one named by the config. ``on_round`` is called with the document after each round.
    """
    from simulations.executors import make_executor

    out = Path(out_dir)
    root = cfg.seed if cfg.seed is not None else secrets.randbits(63)
    given = task is not None and not isinstance(task, MeanTask | LogRegTask)
    task = resolve_task(cfg, task)
    p = plan(cfg, root, task)  # validation that needs the task and the codec: before any work
    if accountant is None:
        from simulations.privacy import make_accountant

        accountant = make_accountant(cfg, p, None)  # validates the certificate for the planned rounds
        accountant.attach_ledger(out / "ledger.sqlite")
    out.mkdir(parents=True, exist_ok=True)
    model = call_task(task, "init_model", root)
    own_exec = executor is None
    if own_exec:
        executor = make_executor(cfg.executor, cfg.scheduler)
    acct = accountant
    config_doc = cfg.as_dict()
    config_doc["seed"] = root
    if given:  # a task object passed as task=: results.json names its class
        config_doc["task"]["name"] = f"{type(task).__module__}:{type(task).__qualname__}"
    if not isinstance(task, MeanTask | LogRegTask):  # a user task: its own settings, not the bundled tasks' keys
        config_doc["task"] = custom_task_record(config_doc["task"], task, cfg.privacy.unit)
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "status": "running",
        "config": config_doc,
        "seeds": {"root": root, "derivation": SEED_DERIVATION, "block_size": BLOCK, "rng": cfg.rng},
        "derived": p.as_dict(),
        "privacy": acct.describe(),
        "rounds": [],
        "metrics_note": METRICS_NOTE,
        "summary": {},
        "software": software_info(),
    }
    results_path = out / "results.json"
    write_atomic(results_path, doc)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.rounds, desc=cfg.name, unit="round", leave=False)
    start = time.perf_counter()
    from secagg_dp.errors import PrivacyBudgetExceeded

    running: int | None = None  # the round in progress (for the failure record)
    try:
        for r in range(1, cfg.rounds + 1):
            running = r
            try:
                rec, model = _one_round(cfg, p, task, model, root, r, executor, acct)
            except PrivacyBudgetExceeded as exc:  # the ledger refused round r before its release
                doc["status"] = "budget_exhausted"
                doc["privacy"] = acct.describe()
                doc["privacy"]["refused"] = {"round": r, "reason": str(exc)}
                break
            doc["rounds"].append(asdict(rec))
            running = None
            doc["privacy"] = acct.describe()
            doc["summary"] = _summary(doc, time.perf_counter() - start)
            write_atomic(results_path, doc)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(eps=f"{rec.epsilon:.3g}", **{k: f"{v:.3g}" for k, v in rec.metrics.items()})
            if on_round is not None:
                on_round(doc)
        else:
            doc["status"] = "complete"
    except KeyboardInterrupt:
        doc["status"] = "interrupted"
        _record_outcome(acct, "failed", "interrupted (KeyboardInterrupt) after the round was charged")
        raise
    except BaseException as exc:
        doc["status"] = "failed"
        doc["failure"] = failure_record(exc, running, len(doc["rounds"]))
        _record_outcome(acct, "failed", f"the run failed after the round was charged: {type(exc).__name__}: {exc}")
        raise
    finally:
        doc["summary"] = _summary(doc, time.perf_counter() - start)
        write_atomic(results_path, doc)
        if bar is not None:
            bar.close()
        if own_exec:
            executor.close()
        close = getattr(acct, "close", None)
        if close is not None:
            close()
    return doc


def failure_record(exc: BaseException, round_: int | None, completed: int) -> dict[str, Any]:
    """results.json ``failure`` of a run that stopped on an error: the exception's ``type`` and ``message``,
    the ``round`` that was running when it was raised (``None`` between rounds) and ``rounds_completed``.

    The round that failed may already have been recorded in the privacy ledger (a round is committed before
    its aggregate is decoded and handed to ``server_update``)."""
    return {"type": type(exc).__name__, "message": str(exc), "round": round_, "rounds_completed": completed}


def custom_task_record(given: dict[str, Any], task: Any, unit: str) -> dict[str, Any]:
    """``config.task`` of a run with a user task: its ``name``, the constructor ``options`` it was built with,
    what it ``reported`` about itself (:func:`simulations.tasks.protocol.task_description`) and its
    ``vector_dim``; ``local_steps`` and ``sample_rate`` at the sample level only, where the simulator runs them.
    The bundled tasks' keys (``dim``, ``learning_rate``) do not describe a user task and are left out."""
    rec: dict[str, Any] = {
        "name": given["name"],
        "options": dict(given.get("options", {})),
        "reported": task_description(task, given.get("options")),
        "vector_dim": int(task.vector_dim),
    }
    if unit == "sample":
        rec.update(local_steps=given["local_steps"], sample_rate=given["sample_rate"])
    return rec


def _record_outcome(acct: Any, outcome: str, reason: str) -> None:
    """Tell the accountant's ledger what its last charged round turned out to be (an accountant without a
    ledger, e.g. a test double, has no ``record_outcome``). Never masks the run's own exception."""
    record = getattr(acct, "record_outcome", None)
    if record is None:
        return
    with contextlib.suppress(Exception):
        record(outcome, reason)


def _summary(doc: dict[str, Any], seconds: float) -> dict[str, Any]:
    rounds = doc["rounds"]
    last = rounds[-1] if rounds else None
    scored = [r for r in rounds if r["metrics"]]
    return {
        "rounds_completed": len(rounds),
        "epsilon": last["epsilon"] if last else 0.0,
        "delta": doc["privacy"].get("delta"),
        "method": doc["privacy"].get("method"),
        **_aborts(rounds, _doc_roster_floor(doc)),
        "mean_included": float(np.mean([r["included"] for r in rounds])) if rounds else 0.0,
        "final_metrics": scored[-1]["metrics"] if scored else {},
        "communication": summarise_communication([r.get("communication") for r in rounds]),
        "seconds": seconds,
    }


def roster_floor(cfg: SimConfig, p: Plan) -> int | None:
    """The roster floor the round's clients enforce: ``p.min_roster`` (``secagg.min_roster`` resolved) for
    active clients; ``None`` for semi-honest ones, which check no roster (``protocols.ClientPolicy``)."""
    return p.min_roster if cfg.secagg.security == "active" else None


def _doc_roster_floor(doc: dict[str, Any]) -> int | None:
    """:func:`roster_floor` from a results document (its config and derived sections)."""
    if doc["config"]["secagg"].get("security") != "active":
        return None
    floor = doc.get("derived", {}).get("min_roster")
    return None if floor is None else int(floor)


def _aborts(rounds: list[dict[str, Any]], min_roster: int | None = None) -> dict[str, Any]:
    """Summary of the aborted rounds: how many, why (reason -> rounds), and what they were charged.

    Every round is charged, aborted ones too (conservative), and every round is the same privacy event, so the
    certificate of the completed rounds alone is the one after that many rounds (``epsilon_completed_rounds``);
    the summary's ``epsilon`` includes the aborted rounds' charge."""
    aborted = [r for r in rounds if r["aborted"]]
    reasons: dict[str, int] = {}
    for r in aborted:
        why = aggregators.abort_reason(r["checked_in"], r.get("dropped", {}), r["threshold"], min_roster)
        why = why or "the protocol aborted (a neighbourhood below the threshold, or a refused message)"
        reasons[why] = reasons.get(why, 0) + 1
    done = len(rounds) - len(aborted)
    return {
        "aborted_rounds": len(aborted),
        "abort_reasons": reasons,
        "epsilon_completed_rounds": rounds[done - 1]["epsilon"] if done else 0.0,
    }


@dataclass
class RoundAggregate:
    ids: np.ndarray  # sorted int64 ids of the clients that checked in
    drop_stages: np.ndarray  # per id: index in aggregators.STAGES of its first dropped stage, or NO_DROP
    included: np.ndarray  # sorted ids whose masked input arrives (dropped at 'unmasking' or never)
    threshold: int
    spec: RoundSpec
    aggregate: np.ndarray | None  # None when the round aborted
    truth: np.ndarray | None
    seconds: dict[str, float]
    communication: Any = None  # crypto mode, completed round: protocols.communication.Communication

    def dropped_counts(self) -> dict[str, int]:
        counts = np.bincount(self.drop_stages, minlength=len(aggregators.STAGES) + 1)
        return {s: int(counts[i]) for i, s in enumerate(aggregators.STAGES)}


def aggregate_noise_groups(cfg: SimConfig, p: Plan, included: int) -> list[int] | None:
    """How the ideal aggregator draws the included clients' noise: group sizes of one draw each, or None.

    None: every client adds its own noise in its block (the crypto mode always; add-then-remove noise
    enforcement, whose components come from each client's seeds; the ideal mode for logreg with per-sample
    noise, whose noise feeds the local steps; and where the discrete Gaussian TV bound is not below 2^-60,
    i.e. tiny sigma). Otherwise the sum of the ``included`` clients' noise is drawn directly
    (:func:`secagg_dp.noise.aggregate.noise_sum_plan`): the same law for Skellam, within total variation
    2^-60 of it for the discrete Gaussian.
    """
    if cfg.privacy.unit != "client":
        return None
    if cfg.privacy.noise_enforcement != "none":
        return None  # add-then-remove: each client's components come from its own seeds (removal is per group)
    from secagg_dp.noise.aggregate import noise_sum_plan

    return noise_sum_plan(cfg.privacy.mechanism, p.sigma_int, included, p.padded_dim)


def aggregate_round(
    cfg: SimConfig,
    p: Plan,
    root: int,
    r: int,
    model: Any,
    executor: Any,
    mode: str,
    task: Any = None,
    *,
    aggregate_noise: bool = True,
) -> RoundAggregate:
    """Check-in, dropouts, client encoding and the modular sum of round ``r`` in ``mode`` (ideal|crypto).

    In the ideal mode with ``aggregate_noise`` (the default) the included clients' noise is one draw of its
    sum where :func:`aggregate_noise_groups` allows it; ``aggregate_noise=False`` keeps per-client noise (then
    the ideal sum equals the crypto mode's bit for bit, see :func:`aggregate_both_modes`).
    """
    t0 = time.perf_counter()
    secs: dict[str, float] = {}
    ids = select_participants(cfg, root, r)
    stages = aggregators.draw_drop_stages(len(ids), cfg.population.dropout, _round_rng(root, r, PURPOSE_DROPOUT))
    keep = stages >= aggregators.INCLUDED_FROM
    included = ids[keep]
    t = cfg.secagg.threshold_for(len(ids))
    counts = np.bincount(stages, minlength=len(aggregators.STAGES) + 1)[: len(aggregators.STAGES)]
    secs["checkin"] = time.perf_counter() - t0
    groups = aggregate_noise_groups(cfg, p, len(included)) if mode == "ideal" and aggregate_noise else None
    spec = RoundSpec(
        task=resolve_task(cfg, task),
        round=r,
        root_seed=root,
        n_clients=cfg.population.clients,
        dim=p.dim,
        bits=cfg.secagg.bits,
        clip=cfg.privacy.clip,
        scale=p.scale,
        rotation_seed=_round_int(root, r, PURPOSE_ROTATION),
        beta=cfg.privacy.beta,
        mechanism=cfg.privacy.mechanism,
        sigma_int=p.sigma_int,
        local_steps=cfg.task.local_steps,
        sample_rate=cfg.task.sample_rate,
        learning_rate=cfg.task.learning_rate,
        model=model,
        unit=cfg.privacy.unit,
        generator=cfg.rng,
        client_noise=groups is None,
    )
    if cfg.privacy.noise_enforcement == "add-then-remove":
        spec = _enforced_spec(cfg, p, spec, stages, len(included), mode)
    aggregate = truth = comm = None
    t1 = time.perf_counter()
    if mode == "ideal":
        if not aggregators.aborts_from_counts(len(ids), [int(c) for c in counts], t, roster_floor(cfg, p)):
            # every participant encodes (as in a real round); only the included rows enter the sum
            parts = executor.map_chunks(run_blocks, spec, chunks_of(blocks_of(ids, keep)))
            aggregate = np.zeros(p.padded_dim, dtype=np.uint64)
            for pt in parts:  # in chunk order: the float truth is summed in the same order on every executor
                aggregate = zq.add_mod(aggregate, pt[1], cfg.secagg.bits)
                truth = pt[2] if truth is None else truth + pt[2]
            if groups is not None:  # the included clients' noise, summed: one draw per coordinate and group
                from secagg_dp.noise.aggregate import sample_noise_sum

                noise = sample_noise_sum(
                    cfg.privacy.mechanism, p.sigma_int, len(included), p.padded_dim, rng=noise_rng(root, r, cfg.rng)
                )
                aggregate = zq.add_mod(aggregate, zq.wrap_int64(noise, cfg.secagg.bits), cfg.secagg.bits)
        secs["clients"] = time.perf_counter() - t1
    else:
        survivors = None
        dropouts = aggregators.dropout_sets(ids, stages)
        # the round's one configuration (protocols.RoundPlan), handed to the clients' pool and the server
        plan_ = None
        if len(ids) >= max(t, 2):
            try:
                plan_ = aggregators.round_plan(
                    ids.tolist(),
                    p.padded_dim,
                    dropouts,
                    bits=cfg.secagg.bits,
                    threshold=t,
                    neighbours=cfg.secagg.neighbours,
                    seed=_round_int(root, r, PURPOSE_CRYPTO),
                    security=cfg.secagg.security,
                    noise=_noise_spec(cfg, p),
                    min_roster=roster_floor(cfg, p),
                )
            except AbortError:  # fewer check-ins than the clients' minimum roster: every client refuses it
                plan_ = None
        if hasattr(executor, "client_pool") and plan_ is not None:
            # clients live on the workers for the round: each shard encodes its own blocks there, one block at
            # a time as its clients are built
            from simulations.executors import chunked

            shards = chunked(blocks_of(ids), executor.parallelism)
            with executor.client_pool([(block_inputs, (spec, group)) for group in shards]) as pool:
                secs["clients"] = time.perf_counter() - t1
                t2 = time.perf_counter()
                try:
                    res = aggregators.crypto_round(pool, plan_, dropouts)
                    aggregate, survivors, comm = res.aggregate, frozenset(res.survivors), res.communication
                except ProtocolError:
                    aggregate = None
        else:
            # each client's row is encoded when its client is built (in this process or in the forked worker
            # holding its shard), a few rows of its block at a time with the block's generator, as run_blocks
            # does for the whole block: the same rows, and never a participants x d array
            from protocols import LazyInputs

            secs["clients"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            inputs = BlockInputs(spec, ids)
            if plan_ is not None:
                try:
                    res = aggregators.crypto_round(LazyInputs(tuple(inputs.ids), inputs, p.padded_dim), plan_, dropouts)
                    aggregate, survivors, comm = res.aggregate, frozenset(res.survivors), res.communication
                except ProtocolError:
                    aggregate = None
            # encoding done here (forked workers' encoding stays in the "secagg" time)
            secs["clients"] += inputs.seconds
            t2 += inputs.seconds
        if aggregate is not None:
            assert survivors is not None  # both come from the same successful protocol call
            if survivors != frozenset(included.tolist()):
                raise ProtocolError(
                    f"Round {r}: the protocol's survivors ({len(survivors)}) differ from the clients whose "
                    f"masked input should have arrived ({len(included)})."
                )
            truth = client_truth(spec, included)
        secs["secagg"] = time.perf_counter() - t2
    return RoundAggregate(ids, stages, included, t, spec, aggregate, truth, secs, comm)


def _enforced_spec(cfg: SimConfig, p: Plan, spec: RoundSpec, stages: np.ndarray, included: int, mode: str) -> RoundSpec:
    """The round's add-then-remove schedule: roster N = the clients that advertised keys (did not drop at
    advertise_keys), d = N - (inputs in the sum), target mu = K_exp sigma_int^2. Ideal mode applies the removal
    the server would make (each client keeps level 0 and the groups not removable at d); crypto mode keeps
    level 0 only in the client's input and lets the protocol add and remove the groups."""
    from dataclasses import replace

    from secagg_dp.noise.add_then_remove import NoiseSchedule
    from simulations.privacy import enforced_target_variance

    roster = max(int(np.count_nonzero(stages >= 1)), 1)
    target, tolerance = enforced_target_variance(p), cfg.privacy.dropout_tolerance
    schedule = NoiseSchedule(target, roster, tolerance)
    kept: tuple[int, ...] = ()
    if mode == "ideal":
        gone = set(schedule.removable(min(max(roster - included, 0), roster)))
        kept = tuple(g for g in range(1, schedule.groups + 1) if g not in gone)
    return replace(
        spec,
        enforcement=(target, roster, tolerance),
        kept_groups=kept,
        noise_seed=_round_int(spec.root_seed, spec.round, PURPOSE_CRYPTO),
        noise_in_protocol=mode == "crypto",
    )


def _noise_spec(cfg: SimConfig, p: Plan):  # noqa: ANN202
    """The protocol's :class:`~secagg_dp.noise.add_then_remove.NoiseSpec` (None without enforcement)."""
    if cfg.privacy.noise_enforcement != "add-then-remove":
        return None
    from secagg_dp.noise.add_then_remove import NoiseSpec
    from simulations.privacy import enforced_target_variance

    return NoiseSpec(enforced_target_variance(p), cfg.privacy.dropout_tolerance)


def _one_round(cfg, p: Plan, task, model, root: int, r: int, executor, acct) -> tuple[RoundRecord, Any]:
    t0 = time.perf_counter()
    ra = aggregate_round(cfg, p, root, r, model, executor, cfg.mode, task)
    secs = ra.seconds
    aborted = ra.aggregate is None
    t4 = time.perf_counter()
    # The ledger commits the round before its aggregate is decoded (released), so a crash can only
    # over-count; a budget refusal raises here and the round is never released. Every round is recorded,
    # aborted ones too (an abort is no proof that nothing was released); its outcome is recorded after.
    eps, order = acct.record_round()
    secs["account"] = time.perf_counter() - t4
    t3 = time.perf_counter()
    metrics: dict[str, float] = {}
    if not aborted:
        spec = ra.spec
        codec = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta)
        decoded = codec.decode(ra.aggregate)
        out = call_task(task, "server_update", model, decoded, len(ra.included), root, round=r)
        model, metrics = check_server_update(task, out, r)
        if ra.truth is not None:  # tasks with truth_metrics (mean: MSE against the survivors' true mean)
            truth = call_task(task, "truth_metrics", decoded, ra.truth, len(ra.included), round=r)
            metrics.update(finite_metrics(task, truth, "truth_metrics"))
    secs["decode"] = time.perf_counter() - t3
    if aborted:  # charged all the same (docs/ledger.md, "Outcomes"): the ledger says why nothing was released
        why = aggregators.abort_reason(len(ra.ids), ra.dropped_counts(), ra.threshold)
        _record_outcome(
            acct, "aborted", why or "the protocol aborted (a neighbourhood below the threshold, or a refused message)"
        )
    else:
        _record_outcome(acct, "released", f"{len(ra.included)} client(s) in the sum")
    secs["total"] = time.perf_counter() - t0
    rec = RoundRecord(
        round=r,
        checked_in=len(ra.ids),
        included=0 if aborted else len(ra.included),
        threshold=ra.threshold,
        dropped=ra.dropped_counts(),
        aborted=aborted,
        epsilon=float(eps),
        order=None if order is None else float(order),
        metrics=metrics,
        seconds=secs,
        communication=None
        if ra.communication is None
        else communication_record(ra.communication, p.padded_dim, ra.spec.bits),
    )
    return rec, model


def aggregate_both_modes(
    cfg: SimConfig, round_: int = 1, executor: Any = None
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The round's modular sum from the ideal aggregator and from the full protocol, same seeds.

    The ideal side keeps per-client noise (``aggregate_noise=False``), so both sums are equal bit for bit.
    """
    from simulations.executors import InProcessExecutor

    root = cfg.seed if cfg.seed is not None else 0
    task = make_task(cfg)
    p = plan(cfg, root, task)
    model = task.init_model(root)
    ex = executor or InProcessExecutor()
    ideal = aggregate_round(cfg, p, root, round_, model, ex, "ideal", task, aggregate_noise=False).aggregate
    crypto = aggregate_round(cfg, p, root, round_, model, ex, "crypto", task).aggregate
    return ideal, crypto
