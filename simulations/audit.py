"""``secagg-dp audit``: an empirical LOWER bound on epsilon beside each certificate, on the simulator's mechanism.

Neighbouring datasets (client level, ``replace-one``, the relation the certificate states): client 0, the
canary, holds +C e_1 in D and its replacement -C e_1 in D' (the worst case the accountant assumes: the
encoded difference has norm 2 C s, the codec's replace-one bound up to rounding); every other client holds
the zero vector. Each trial runs ``rounds`` rounds of the round with the configuration's check-in, dropouts,
threshold aborts, mechanism, noise scale and noise enforcement, and computes the observer's log likelihood
ratio of D against D' from the view:

* ``analyst``: K (clients in the sum) and the aggregate. Its decoded canary coordinate y (grid units) is,
  given K, the canary's shift +-C s with probability w = K/n (every client is in the sum with the same
  probability, so given K the canary is one of them with probability K/n; fixed-size sampling: m/n) plus the
  K noise shares' sum, of variance v = K sigma^2 (add-then-remove: the target mu):
  LR = (w phi_v(y - Cs) + (1 - w) phi_v(y)) / (w phi_v(y + Cs) + (1 - w) phi_v(y)).
* ``server``: also who took part and who dropped, so whether the canary is in the sum: LR = 1 if not, else
  phi_v(y - Cs)/phi_v(y + Cs) = exp(2 Cs y / v), with v the kept noise variance it knows (add-then-remove:
  K x the kept variance at roster N, d = N - K dropouts).
* ``coalition``: the active server with c = ``secagg.corrupt_clients`` colluders (clients 1..c), in its own run
  of the round: it cuts the sum to the canary, the colluders and as few honest others as the round's
  threshold forces (none when the certificate's smallest sum m is 1), strips every add-then-remove group and
  subtracts the colluders' inputs and noise; score exp(2 Cs y / (h v)) with h honest noise shares left.

phi_v is the Gaussian density of variance v: y is a weighted sum of the padded_dim coordinates of the noise
sum (the codec's rotation is orthonormal), so its law is that d-fold convolution; the Gaussian LR is the test
statistic, not an assumption of the bound: any function of the view is a valid test, and an approximation
can only cost power. Where the view's canary coordinate is a lattice coordinate (task.dim = 1, no
add-then-remove) the exact LR replaces it (``statistic = "auto"``, :func:`_exact_scores`: the exact Skellam or
discrete-Gaussian-sum pmf, the canary's randomized rounding, :mod:`secagg_dp.audit.llr`); results.json
labels each observer's ``test.statistic``. The log LRs of the rounds add (independent rounds, the same
data). Aborted rounds reveal nothing (LR = 1; whether a round aborts does not depend on the inputs).
Thresholds are chosen on a held-out third of the trials, Clopper-Pearson bounds on the rest
(:func:`secagg_dp.audit.audit_from_scores`).

Engines. ``batched`` (default, ideal mode): the trials of a chunk are one vectorised computation built from the
round's own parts: the check-in coins, :func:`simulations.aggregators.draw_drop_stages`, the threshold abort
rule of :func:`simulations.aggregators.abort_reason`, the canary encoded by the real codec (clip, rotation,
conditional randomized rounding: :meth:`~secagg_dp.quantize.ZqCodec.encode`), the other included clients'
noise as one draw of its sum (:func:`secagg_dp.noise.aggregate.sample_noise_sum`, what the ideal round does;
add-then-remove: the kept Skellam noise, same law as level 0 plus the kept groups), the modular sum, and
:meth:`~secagg_dp.quantize.ZqCodec.decode`. ``round``: every trial calls the simulator's round function
:func:`simulations.runner.aggregate_round` itself (``mode = "ideal"`` or ``"crypto"``, the full protocol),
with a canary task; slow, used for crypto mode and to check the batched engine.

Faults (to show the audit can fail): ``halve-noise`` halves the noise std after certification (the
certificate is the configured one); ``strip-noise`` models the SecAgg+ count-inflation attack on
add-then-remove noise: the server removes every removable group, each client keeps only level 0 (mu/N).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from secagg_dp import zq
from secagg_dp.audit import audit_from_scores, one_run_epsilon_lower
from secagg_dp.errors import ConfigError, ParameterError
from secagg_dp.rng import resolve_rng
from simulations import aggregators
from simulations.config import SimConfig

__all__ = [
    "OBSERVERS",
    "ROUND_OBSERVERS",
    "FAULTS",
    "ENGINES",
    "STATISTICS",
    "run_audit",
    "run_one_run_audit",
    "audit_scores",
    "CanaryTask",
]

OBSERVERS = ("analyst", "server", "coalition")
ROUND_OBSERVERS = ("analyst", "server")  # the round engine runs the honest server's round only
FAULTS = ("halve-noise", "strip-noise")
ENGINES = ("batched", "round")
STATISTICS = ("auto", "exact-llr", "gaussian-llr")
_CHUNK_CELLS = 1 << 20  # trials x padded_dim per vectorised chunk (~8 MB per int64 array)


@dataclass(frozen=True)
class _Setup:
    cfg: SimConfig
    plan: Any  # simulations.runner.Plan
    codec: Any  # secagg_dp.quantize.ZqCodec (rotation seed 0: any fixed rotation, the mechanism is the same)
    shift: float  # C s: the canary's shift of its decoded coordinate, grid units
    sigma: float  # per-client noise std actually used (after a fault)
    fault: str | None
    min_sum: int  # m: the smallest sum the protocol lets finish (simulations.privacy.coalition_min_sum)
    statistic: str = "gaussian-llr"  # "exact-llr" where the view's canary coordinate is a lattice point


def _exact_feasible(cfg: SimConfig, codec: Any, sigma: float) -> bool:
    """The exact LR is computable when the decoded canary coordinate IS a lattice coordinate of the aggregate
    (padded_dim = 1: the rotation is a sign) and the noise pmf of any number of shares is: Skellam always
    (scipy), a sum of k <= n discrete Gaussians while the truncated convolution fits (secagg_dp.audit.llr).
    Not under add-then-remove: the analyst's exact law would mix over the roster it does not see."""
    if codec.padded_dim != 1 or cfg.privacy.mechanism not in ("ddg", "skellam"):
        return False
    if cfg.privacy.noise_enforcement == "add-then-remove":  # the analyst's law mixes over the unseen roster
        return False
    if cfg.privacy.mechanism == "skellam":
        return True
    from secagg_dp.audit.llr import DDG_TAIL_BITS, MAX_SUPPORT

    r = math.ceil(sigma * math.sqrt(2.0 * math.log(2.0) * DDG_TAIL_BITS)) + 1
    return (2 * r + 1) * cfg.population.clients <= MAX_SUPPORT


def _setup(cfg: SimConfig, fault: str | None, statistic: str = "gaussian-llr") -> _Setup:
    from simulations.runner import plan as make_plan

    if cfg.privacy.unit != "client":
        raise ConfigError(
            "Config key 'privacy.unit' must be 'client' for an audit (client-level replace-one canary), "
            f"not {cfg.privacy.unit!r}."
        )
    if getattr(cfg.population, "participation", "checkin") != "checkin":
        raise ConfigError(
            "Config key 'population.participation' must be 'checkin' for an audit (the canary trials model the "
            f"per-round check-in coin), not {cfg.population.participation!r}."
        )
    if fault is not None and fault not in FAULTS:
        raise ParameterError(f"Argument 'fault' must be one of {FAULTS} or None, not {fault!r}.")
    if fault == "strip-noise" and cfg.privacy.noise_enforcement != "add-then-remove":
        raise ParameterError(
            "Argument 'fault' = 'strip-noise' needs privacy.noise_enforcement = 'add-then-remove' (the groups "
            "the server removes); without enforcement there is no removable noise."
        )
    p = make_plan(cfg, cfg.seed if cfg.seed is not None else 0)
    from simulations.clients import make_codec

    codec = make_codec(p.dim, cfg.secagg.bits, cfg.privacy.clip, p.scale, 0, cfg.privacy.beta)
    sigma = p.sigma_int / 2.0 if fault == "halve-noise" else p.sigma_int
    from simulations.privacy import coalition_min_sum

    if statistic not in STATISTICS:
        raise ParameterError(f"Argument 'statistic' must be one of {STATISTICS}, not {statistic!r}.")
    feasible = _exact_feasible(cfg, codec, sigma)
    if statistic == "exact-llr" and not feasible:
        raise ParameterError(
            "Argument 'statistic' = 'exact-llr' needs a one-coordinate lattice view (padded_dim = 1, task.dim = 1) "
            "and Skellam noise or a discrete Gaussian sum small enough to convolve; use 'auto' or 'gaussian-llr'."
        )
    resolved = "exact-llr" if statistic == "exact-llr" or (statistic == "auto" and feasible) else "gaussian-llr"
    return _Setup(cfg, p, codec, cfg.privacy.clip * p.scale, sigma, fault, coalition_min_sum(cfg)[0], resolved)


def _noise_log_pmf(setup: _Setup, z: np.ndarray, k: int, var: float) -> np.ndarray:
    """log P[Z = z], Z the sum of ``k`` shares of per-share variance ``var`` of the configured mechanism (exact:
    Skellam of variance k var, or the k-fold discrete Gaussian convolution, :mod:`secagg_dp.audit.llr`)."""
    from secagg_dp.audit.llr import ddg_sum_log_pmf, skellam_log_pmf

    if setup.cfg.privacy.mechanism == "skellam":
        return skellam_log_pmf(z, max(k, 1) * var)
    return ddg_sum_log_pmf(z, math.sqrt(var), max(k, 1))[0]


def _exact_scores(
    setup: _Setup, y: np.ndarray, k: np.ndarray, var: np.ndarray, w: np.ndarray | None = None
) -> np.ndarray:
    """Exact log LR of an integer view y = s + Z (one-coordinate lattice view), per trial with Z the sum of k[i]
    shares of variance var[i]. The canary's shift s is +-mu rounded by the codec's randomized rounding
    (floor(mu) w.p. 1 - f, ceil(mu) w.p. f, f = mu - floor(mu)), so each hypothesis' pmf is that two-point
    mixture; with ``w`` (the analyst) the canary is in the sum with probability w[i], else s = 0."""
    mu = setup.shift
    lo, f = math.floor(mu), mu - math.floor(mu)
    yi = np.rint(y).astype(np.int64)
    out = np.zeros(len(yi))
    pairs, inverse = np.unique(np.stack([k, var], axis=1), axis=0, return_inverse=True)
    inv = inverse.reshape(-1)
    for g, (kk, vv) in enumerate(pairs):
        sel = np.flatnonzero(inv == g)
        if not len(sel):
            continue

        def lp(shift: int, sel: np.ndarray = sel, kk: float = kk, vv: float = vv) -> np.ndarray:
            return _noise_log_pmf(setup, yi[sel] - shift, int(kk), float(vv))

        with np.errstate(divide="ignore"):
            lf, l1f = math.log(f) if f > 0 else -np.inf, math.log1p(-f)
        plus = np.logaddexp(l1f + lp(lo), lf + lp(lo + 1))  # under D: y - s with s in {lo, lo + 1}
        minus = np.logaddexp(l1f + lp(-lo), lf + lp(-lo - 1))  # under D'
        if w is None:
            out[sel] = plus - minus
        else:
            from secagg_dp.audit.llr import mixture_llr

            out[sel] = mixture_llr(plus, minus, lp(0), w[sel])
    return out


def _certificates(cfg: SimConfig, p: Any) -> dict[str, float]:
    import warnings

    from simulations.privacy import SimAccountant, make_accountant

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        acct = make_accountant(cfg, p)
    if not isinstance(acct, SimAccountant):  # pragma: no cover - run_audit refuses other participation schemes
        raise ConfigError("An audit needs the per-round check-in accountant (population.participation = 'checkin').")
    try:
        return {
            "analyst": float(acct.planned_epsilon),
            "server": float(acct.server_planned_epsilon),
            "coalition": float(acct.coalition_planned_epsilon),
        }
    finally:
        acct.close()


def _gauss_mix_llr(y: np.ndarray, mu: float, v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """log [(w phi(y - mu) + (1-w) phi(y)) / (w phi(y + mu) + (1-w) phi(y))], phi of variance v (vectorised)."""
    with np.errstate(divide="ignore"):
        lw, l1w = np.log(w), np.log1p(-w)
    a = np.logaddexp(lw - (y - mu) ** 2 / (2 * v), l1w - y**2 / (2 * v))
    b = np.logaddexp(lw - (y + mu) ** 2 / (2 * v), l1w - y**2 / (2 * v))
    out = np.where(w > 0, a - b, 0.0)
    return np.asarray(out, dtype=np.float64)


def _abort_mask(cfg: SimConfig, checked: np.ndarray, stage_counts: np.ndarray) -> np.ndarray:
    """Per trial, :func:`simulations.aggregators.abort_reason` is not None (vectorised): fewer than t = max(t, 2)
    clients checked in, or left after some stage."""
    table = np.array([max(cfg.secagg.threshold_for(k), 2) for k in range(cfg.population.clients + 1)])
    t = table[checked]
    alive = checked[:, None] - np.cumsum(stage_counts, axis=1)
    return np.asarray((checked < t) | (alive < t[:, None]).any(axis=1))


def _kept_variance(setup: _Setup, roster: int, in_sum: int, *, strip: bool = False) -> float:
    """One included client's noise variance left in the sum under add-then-remove (``strip`` or the strip-noise
    fault: level 0 only, mu/N)."""
    from secagg_dp.noise.add_then_remove import NoiseSchedule

    spec = setup.plan.noise  # the NoiseSpec the round itself enforces (target mu, tolerance); faults act below
    if spec is None:
        raise ConfigError(
            "The add-then-remove noise left in the sum needs privacy.noise_enforcement = 'add-then-remove'."
        )
    sched = NoiseSchedule(spec.target_variance, max(roster, 1), spec.tolerance)
    if strip or setup.fault == "strip-noise":
        v0 = float(sched.base_variance)
        return v0 / 4.0 if setup.fault == "halve-noise" else v0
    v = float(sched.kept_variance_exact(min(max(roster - in_sum, 0), roster)))
    return v / 4.0 if setup.fault == "halve-noise" else v


def _batched_round(
    setup: _Setup, sign: float, b: int, rng: np.random.Generator, *, coalition: bool = False
) -> dict[str, np.ndarray]:
    """One round of ``b`` independent trials (canary +-C e_1): each observer's log LR, vectorised.

    With ``coalition`` also the coalition's run of the round: the active server and the c colluders (clients
    1..c) keep in the sum, of the clients whose masked input arrived, the canary, the colluders and only as many
    honest others as the round's threshold t forces (at most min_sum = m of the certificate when that is 1:
    the canary alone), strip every add-then-remove group (each honest client keeps level 0, mu/N), and subtract
    the colluders' inputs and noise: h honest noise shares remain, h = 1 + min(others, max(L - 1 - c_in, 0)),
    L = m if m = 1 else t. Its score is exp(2 Cs y / (h v)) as for the server (it knows h and v)."""
    from secagg_dp.noise.aggregate import sample_noise_sum

    cfg, codec = setup.cfg, setup.codec
    pop, n, bits = cfg.population, cfg.population.clients, cfg.secagg.bits
    if pop.sampling == "fixed":
        order = np.argsort(rng.random((b, n)), axis=1)
        checked = np.zeros((b, n), dtype=bool)
        np.put_along_axis(checked, order[:, : pop.fixed_size], True, axis=1)
    else:
        checked = rng.random((b, n)) < pop.checkin
    stages = aggregators.draw_drop_stages(b * n, pop.dropout, rng).reshape(b, n)
    first = np.where(checked, stages, len(aggregators.STAGES)).astype(np.int64)  # not checked in: no stage
    flat = np.bincount(
        (first + np.arange(b)[:, None] * (len(aggregators.STAGES) + 1)).ravel(),
        minlength=b * (len(aggregators.STAGES) + 1),
    )
    stage_counts = flat.reshape(b, -1)[:, : len(aggregators.STAGES)]
    k_checked = checked.sum(axis=1)
    aborted = _abort_mask(cfg, k_checked, stage_counts)
    included = checked & (stages >= aggregators.INCLUDED_FROM)
    k = included.sum(axis=1)
    roster = (checked & (stages >= 1)).sum(axis=1)  # advertised keys (add-then-remove roster N)
    canary_in = included[:, 0] & ~aborted
    live = ~aborted & (k > 0)
    # per-trial variance of one included client's noise left in the sum
    enforced = cfg.privacy.noise_enforcement == "add-then-remove"
    if enforced:
        pairs, inverse = np.unique(roster * (n + 1) + k, return_inverse=True)
        table = np.array([_kept_variance(setup, int(c) // (n + 1), int(c) % (n + 1)) for c in pairs])
        var1 = table[inverse.reshape(-1)]
    else:
        var1 = np.full(b, setup.sigma**2)
    dim = codec.padded_dim
    agg = np.zeros((b, dim), dtype=np.uint64)
    rows = np.flatnonzero(canary_in)
    if len(rows):
        x = np.zeros((len(rows), codec.dim))
        x[:, 0] = sign * cfg.privacy.clip
        agg[rows] = codec.encode(x, rng=rng)
    canary_rows = agg.copy() if coalition else agg  # the canary's encoded rows before any noise
    mech = cfg.privacy.mechanism
    live_idx = np.flatnonzero(live)
    groups, inverse = np.unique(np.stack([k[live_idx], var1[live_idx]], axis=1), axis=0, return_inverse=True)
    order = np.argsort(inverse.reshape(-1), kind="stable")
    bounds = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(groups) + 1))
    for g, (kk, var) in enumerate(groups):  # one draw of the noise sum per (K, per-client variance) group
        sel = live_idx[order[bounds[g] : bounds[g + 1]]]
        noise = sample_noise_sum(mech, math.sqrt(float(var)), int(kk), (len(sel), dim), rng=rng)
        agg[sel] = zq.add_mod(agg[sel], zq.wrap_int64(noise, bits), bits)
    y = np.zeros(b)
    if live.any():
        y[live] = codec.decode(agg[live])[:, 0] * codec.scale  # the canary coordinate, grid units
    mu = setup.shift
    v = np.maximum(k, 1) * var1
    v_analyst = np.full(b, float(setup.plan.expected_checkins * setup.plan.sigma_int**2)) if enforced else v
    w = np.where(live, k / n if pop.sampling == "checkin" else pop.fixed_size / n, 0.0)
    if setup.statistic == "exact-llr":
        kk = np.maximum(k, 1).astype(np.float64)
        analyst = np.where(live, _exact_scores(setup, y, kk, var1, w), 0.0)
        server = np.where(canary_in, _exact_scores(setup, y, kk, var1), 0.0)
    else:
        analyst = np.where(live, _gauss_mix_llr(y, mu, v_analyst, w), 0.0)
        server = np.where(canary_in, 2.0 * mu * y / v, 0.0)
    out = {"analyst": analyst, "server": server}
    if coalition:
        out["coalition"] = _coalition_scores(setup, canary_rows, checked, included, roster, canary_in, rng)
    return out


def _coalition_scores(
    setup: _Setup,
    encoded: np.ndarray,
    checked: np.ndarray,
    included: np.ndarray,
    roster: np.ndarray,
    canary_in: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """The coalition's log LR per trial (see :func:`_batched_round`): the canary's encoded row (``encoded``, zero
    where the canary is not in the sum) plus h honest noise shares."""
    from secagg_dp.noise.aggregate import sample_noise_sum

    cfg, codec = setup.cfg, setup.codec
    b, n, bits = len(canary_in), cfg.population.clients, cfg.secagg.bits
    c = int(getattr(cfg.secagg, "corrupt_clients", 0))
    c_in = included[:, 1 : 1 + c].sum(axis=1)
    others = included[:, 1 + c :].sum(axis=1)
    table = np.array([max(cfg.secagg.threshold_for(k), 2) for k in range(n + 1)])
    keep = np.full(b, 1) if setup.min_sum == 1 else table[checked.sum(axis=1)]
    h = 1 + np.minimum(others, np.maximum(keep - 1 - c_in, 0))
    if cfg.privacy.noise_enforcement == "add-then-remove":
        pairs, inverse = np.unique(roster, return_inverse=True)
        per = np.array([_kept_variance(setup, int(r), 0, strip=True) for r in pairs])[inverse.reshape(-1)]
    else:
        per = np.full(b, setup.sigma**2)
    view = encoded.copy()
    idx = np.flatnonzero(canary_in)
    groups, inverse = np.unique(np.stack([h[idx], per[idx]], axis=1), axis=0, return_inverse=True)
    inv = inverse.reshape(-1)
    for g, (hh, var) in enumerate(groups):
        sel = idx[inv == g]
        noise = sample_noise_sum(
            cfg.privacy.mechanism, math.sqrt(float(var)), int(hh), (len(sel), codec.padded_dim), rng=rng
        )
        view[sel] = zq.add_mod(view[sel], zq.wrap_int64(noise, bits), bits)
    score = np.zeros(b)
    if len(idx):
        y = codec.decode(view[idx])[:, 0] * codec.scale
        if setup.statistic == "exact-llr":
            score[idx] = _exact_scores(setup, y, h[idx].astype(np.float64), per[idx])
        else:
            score[idx] = 2.0 * setup.shift * y / (h[idx] * per[idx])
    return score


class CanaryTask:
    """A client-level task for the audit: client 0 holds ``sign`` x C e_1, every other client the zero vector."""

    name = "audit-canary"
    metric = "none"

    def __init__(self, dim: int, clip: float, sign: float) -> None:
        self.dim, self.clip, self.sign = dim, clip, sign

    @property
    def vector_dim(self) -> int:
        return self.dim

    def init_model(self, root_seed: int) -> None:
        return None

    def client_vectors(self, model: object, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        ids = np.asarray(client_ids)
        out = np.zeros((len(ids), self.dim))
        out[ids == 0, 0] = self.sign * self.clip
        return out

    def server_update(self, model: object, decoded_sum: np.ndarray, participants: int, root_seed: int) -> Any:
        return model, {}


def _round_engine_round(setup: _Setup, sign: float, root: int, r: int, executor: Any) -> dict[str, np.ndarray]:
    """One trial's round through :func:`simulations.runner.aggregate_round` (the simulator's round function)."""
    from simulations.clients import make_codec
    from simulations.runner import aggregate_round

    cfg = setup.cfg
    p = replace(setup.plan, sigma_int=setup.sigma)
    task = CanaryTask(setup.plan.dim, cfg.privacy.clip, sign)
    ra = aggregate_round(cfg, p, root, r, None, executor, cfg.mode, task, aggregate_noise=False)
    n = cfg.population.clients
    if ra.aggregate is None or len(ra.included) == 0:
        return {"analyst": np.zeros(1), "server": np.zeros(1)}
    spec = ra.spec
    codec = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta)
    y = codec.decode(ra.aggregate)[0] * codec.scale
    k = len(ra.included)
    if cfg.privacy.noise_enforcement == "add-then-remove":
        roster = int(np.count_nonzero(ra.drop_stages >= 1))
        v = k * _kept_variance(setup, roster, k)
        va = float(p.expected_checkins * setup.plan.sigma_int**2)
    else:
        v = va = k * setup.sigma**2
    w = k / n if cfg.population.sampling == "checkin" else cfg.population.fixed_size / n
    mu = setup.shift
    analyst = _gauss_mix_llr(np.array([y]), mu, np.array([va]), np.array([w]))
    server = np.array([2.0 * mu * y / v if 0 in set(ra.included.tolist()) else 0.0])
    return {"analyst": analyst, "server": server}


def audit_scores(
    cfg: SimConfig,
    trials: int,
    *,
    rng: np.random.Generator | None = None,
    fault: str | None = None,
    engine: str = "batched",
    progress: bool = False,
    coalition: bool = True,
    statistic: str = "auto",
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The observers' log LRs of ``trials`` independent runs (``cfg.rounds`` rounds each) on D (canary +C e_1)
    and on D' (-C e_1): ({observer: scores on D}, {observer: scores on D'}). The batched engine scores
    :data:`OBSERVERS` (the coalition's run only with ``coalition``), the round engine :data:`ROUND_OBSERVERS`.
    ``statistic``: "exact-llr" (the exact LR of the view, :func:`_exact_scores`; batched engine, one-coordinate
    lattice views), "gaussian-llr" (the Gaussian approximation) or "auto" (exact where feasible)."""
    if engine not in ENGINES:
        raise ParameterError(f"Argument 'engine' must be one of {ENGINES}, not {engine!r}.")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 6:
        raise ParameterError(f"Argument 'trials' must be an integer >= 6 (per side), not {trials!r}.")
    gen = resolve_rng(rng)
    if engine == "round" and statistic == "exact-llr":
        raise ParameterError("Argument 'statistic' = 'exact-llr' needs engine = 'batched'.")
    setup = _setup(cfg, fault, statistic if engine == "batched" else "gaussian-llr")
    if engine == "round" and fault == "strip-noise":
        raise ParameterError("Argument 'fault' = 'strip-noise' is modelled by engine = 'batched' only.")
    sides: list[dict[str, np.ndarray]] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=2 * trials * cfg.rounds, unit="trial-round", desc="audit", leave=False)
    try:
        if engine == "batched":
            chunk = max(64, _CHUNK_CELLS // setup.codec.padded_dim)
            names = OBSERVERS if coalition else ROUND_OBSERVERS
            for sign in (1.0, -1.0):
                out = {o: np.zeros(trials) for o in names}
                for lo in range(0, trials, chunk):
                    b = min(chunk, trials - lo)
                    for _ in range(cfg.rounds):
                        part = _batched_round(setup, sign, b, gen, coalition=coalition)
                        for o in names:
                            out[o][lo : lo + b] += part[o]
                        if bar is not None:
                            bar.update(b)
                sides.append(out)
        else:
            from simulations.executors import InProcessExecutor

            ex = InProcessExecutor()
            root = int(gen.integers(0, 2**62))
            r = 0
            for sign in (1.0, -1.0):
                out = {o: np.zeros(trials) for o in ROUND_OBSERVERS}
                for i in range(trials):
                    for _ in range(cfg.rounds):
                        r += 1
                        part = _round_engine_round(setup, sign, root, r, ex)
                        for o in ROUND_OBSERVERS:
                            out[o][i] += part[o][0]
                        if bar is not None:
                            bar.update(1)
                sides.append(out)
    finally:
        if bar is not None:
            bar.close()
    return sides[0], sides[1]


def run_audit(
    cfg: SimConfig,
    *,
    trials: int = 20_000,
    observer: str = "all",
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
    fault: str | None = None,
    engine: str = "batched",
    progress: bool = False,
    statistic: str = "auto",
) -> dict[str, Any]:
    """Audit ``cfg``: for each observer, a LOWER bound on epsilon at the certified delta (with ``confidence``)
    beside the certificate. ``trials`` per side (D and D'); each trial is ``cfg.rounds`` rounds.

    Returns the ``audit`` object of results.json: per observer ``epsilon_lower``, ``epsilon_certified``,
    ``delta``, ``trials``, ``confidence`` (and the test's counts), plus what was audited. The lower bound is an
    estimate (``certificate: false``); eps_lower > eps_certified means the run is not what was certified.
    ``statistic`` chooses the test (:func:`audit_scores`); each observer's ``test.statistic`` says which ran.
    """
    if observer != "all" and observer not in OBSERVERS:
        raise ParameterError(f"Argument 'observer' must be one of {(*OBSERVERS, 'all')}, not {observer!r}.")
    if engine == "round" and observer == "coalition":
        raise ParameterError(
            "Argument 'observer' = 'coalition' needs engine = 'batched': the round engine runs the honest "
            "server's round, not the coalition's."
        )
    available = OBSERVERS if engine == "batched" else ROUND_OBSERVERS
    names = available if observer == "all" else (observer,)
    t0 = time.perf_counter()
    pos, neg = audit_scores(
        cfg,
        trials,
        rng=rng,
        fault=fault,
        engine=engine,
        progress=progress,
        coalition="coalition" in names,
        statistic=statistic,
    )
    seconds = time.perf_counter() - t0
    used = _setup(cfg, fault, statistic if engine == "batched" else "gaussian-llr").statistic
    setup = _setup(cfg, None)
    certs = _certificates(cfg, setup.plan)
    delta = cfg.privacy.delta
    out: dict[str, Any] = {
        "certificate": False,
        "kind": "empirical lower bound (Clopper-Pearson, threshold on a held-out third)",
        "neighbouring": "replace-one",
        "canary": "client 0 holds +C e_1 (D) or -C e_1 (D'); every other client the zero vector",
        "mode": "ideal" if engine == "batched" else cfg.mode,  # the crypto sum equals the ideal one bit for bit
        "engine": engine,
        "rounds": cfg.rounds,
        "fault": fault,
        "observers": list(names),
        "seconds": seconds,
        "citation": "Jagielski, Ullman & Oprea 2020; Nasr et al. 2021; Kairouz, Oh & Viswanath 2015 Thm 2.1",
    }
    for o in names:
        est = audit_from_scores(pos[o], neg[o], delta=delta, confidence=confidence)
        out[o] = {
            "observer": o,
            "epsilon_lower": est.epsilon_lower,
            "epsilon_certified": certs[o],
            "delta": delta,
            "trials": trials,
            "confidence": confidence,
            "ratio": est.epsilon_lower / certs[o] if certs[o] > 0 else None,
            "violation": est.epsilon_lower > certs[o],
            "test": {**est.as_dict(), "statistic": used},
        }
    if "coalition" in out:
        out["coalition"].update(
            colluders=int(getattr(cfg.secagg, "corrupt_clients", 0)),
            min_sum=setup.min_sum,
            attack="the sum cut to the round's threshold t (m = 1: the canary alone), every add-then-remove group "
            "stripped, the colluders' inputs and noise subtracted",
        )
    return out


class _OneRunTask:
    """The config's task with canary clients 0..m-1: canary i holds S_i C e_i instead of its data."""

    def __init__(self, base: Any, signs: np.ndarray, clip: float) -> None:
        self.base, self.signs, self.clip = base, signs, clip
        self.name = getattr(base, "name", "task") + "+canaries"
        self.metric = getattr(base, "metric", "none")

    @property
    def vector_dim(self) -> int:
        return int(self.base.vector_dim)

    def init_model(self, root_seed: int) -> Any:
        return self.base.init_model(root_seed)

    def client_vectors(self, model: object, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        ids = np.asarray(client_ids, dtype=np.int64)
        rows = np.array(self.base.client_vectors(model, ids, round, root_seed), dtype=np.float64)
        m = len(self.signs)
        can = ids < m
        rows[can] = 0.0
        rows[np.flatnonzero(can), ids[can]] = self.signs[ids[can]] * self.clip
        return rows

    def server_update(self, model: object, decoded_sum: np.ndarray, participants: int, root_seed: int) -> Any:
        return self.base.server_update(model, decoded_sum, participants, root_seed)


def run_one_run_audit(
    cfg: SimConfig,
    *,
    canaries: int | None = None,
    guesses: int | None = None,
    rng: np.random.Generator | None = None,
    confidence: float = 0.95,
    fault: str | None = None,
) -> dict[str, Any]:
    """One-run audit (Steinke, Nasr & Jagielski 2023) of the analyst's view in ONE simulated run of ``cfg``.

    Clients 0..m-1 are canaries: canary i holds S_i C e_i, S_i = +-1 by a fair coin (one replace-one step
    each); the other clients keep the task's data. The run's ``cfg.rounds`` rounds go through
    :func:`simulations.runner.aggregate_round` (ideal or crypto mode). Score of canary i: the sum over
    completed rounds of decoded[i] minus the expected contribution of the other clients to coordinate i
    (gamma x their clipped rows, known to an auditor who knows the rest of the data but not who took part);
    the ``guesses`` canaries with the largest |score| are guessed sign(score), the rest abstain. The bound is
    :func:`secagg_dp.audit.one_run_epsilon_lower` (their Theorem 3) at the certified delta.
    """
    from simulations.clients import make_codec
    from simulations.executors import InProcessExecutor
    from simulations.privacy import effective_gamma
    from simulations.runner import aggregate_round
    from simulations.tasks import make_task

    if fault == "strip-noise":
        raise ParameterError("Argument 'fault' = 'strip-noise' is modelled by run_audit's batched engine only.")
    setup = _setup(cfg, fault)
    n, dim = cfg.population.clients, setup.plan.dim
    m = min(n // 2, dim) if canaries is None else canaries
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= min(n, dim):
        raise ParameterError(
            f"Argument 'canaries' must be an integer in [1, min(clients, dim) = {min(n, dim)}], not {m!r}."
        )
    r_guess = m if guesses is None else guesses
    if isinstance(r_guess, bool) or not isinstance(r_guess, int) or not 1 <= r_guess <= m:
        raise ParameterError(f"Argument 'guesses' must be an integer in [1, canaries = {m}], not {r_guess!r}.")
    gen = resolve_rng(rng)
    signs = np.where(gen.random(m) < 0.5, -1.0, 1.0)
    base = make_task(cfg)
    task = _OneRunTask(base, signs, cfg.privacy.clip)
    root = int(gen.integers(0, 2**62))
    p = replace(setup.plan, sigma_int=setup.sigma)
    ex = InProcessExecutor()
    model = task.init_model(root)
    rate = (
        cfg.population.fixed_size / n
        if cfg.population.sampling == "fixed"
        else effective_gamma(cfg.population.checkin, cfg.population.dropout)
    )
    others = np.arange(m, n, dtype=np.int64)
    scores = np.zeros(m)
    t0 = time.perf_counter()
    for r in range(1, cfg.rounds + 1):
        ra = aggregate_round(cfg, p, root, r, model, ex, cfg.mode, task)
        if ra.aggregate is None:
            continue
        spec = ra.spec
        codec = make_codec(spec.dim, spec.bits, spec.clip, spec.scale, spec.rotation_seed, spec.beta)
        decoded = codec.decode(ra.aggregate)
        expected = np.zeros(dim)
        if len(others):
            rows = np.asarray(base.client_vectors(model, others, r, root), dtype=np.float64)
            norms = np.maximum(np.linalg.norm(rows, axis=1) / cfg.privacy.clip, 1.0)
            expected = rate * (rows / norms[:, None]).sum(axis=0)
        scores += decoded[:m] - expected[:m]
        model, _ = task.server_update(model, decoded, len(ra.included), root)
    order = np.argsort(-np.abs(scores), kind="stable")[:r_guess]
    correct = int(np.count_nonzero(np.sign(scores[order]) == signs[order]))
    delta = cfg.privacy.delta
    eps = one_run_epsilon_lower(m, r_guess, correct, delta, confidence)
    certs = _certificates(cfg, setup.plan)
    return {
        "certificate": False,
        "kind": "one-run lower bound (Steinke, Nasr & Jagielski 2023, Theorem 3)",
        "neighbouring": "replace-one",
        "mode": cfg.mode,
        "rounds": cfg.rounds,
        "fault": fault,
        "observers": ["analyst"],
        "seconds": time.perf_counter() - t0,
        "analyst": {
            "observer": "analyst",
            "epsilon_lower": eps,
            "epsilon_certified": certs["analyst"],
            "delta": delta,
            "trials": 1,
            "confidence": confidence,
            "canaries": m,
            "guesses": r_guess,
            "correct": correct,
            "ratio": eps / certs["analyst"] if certs["analyst"] > 0 else None,
            "violation": eps > certs["analyst"],
        },
    }
