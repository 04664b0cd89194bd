"""The Flower path's parts that need no ``flwr``: the round's public parameters, the client's encoding, the
client's state between Flower messages, the ideal-mode reference and the privacy event of a round.

A client's encoding is the simulator's (:mod:`simulations.clients`): L2-clip to C, the Z_q codec of Kairouz, Liu
& Steinke (2021, Alg. 1-2) and per-client discrete Gaussian or Skellam noise of grid std ``sigma_int``; the noise
per client is sigma_local = z C / sqrt(m) in model units for the m sampled clients, as in the simulator's plan
(:func:`simulations.runner.plan`), so the m clients' noise sums to std z C.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocols.pool import RoundPlan
from protocols.security import ClientPolicy
from secagg_dp import zq
from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.errors import ParameterError
from secagg_dp.noise import SIGMA_MAX
from secagg_dp.quantize import ZqCodec
from secagg_dp.quantize.scale import DEFAULT_BETA, sampler_capped_scale

__all__ = [
    "FlowerDPConfig",
    "client_generator",
    "encode_update",
    "ideal_round",
    "round_event",
    "plan_to_record",
    "plan_from_record",
    "MECHANISMS",
]

MECHANISMS = ("ddg", "skellam")


@dataclass(frozen=True)
class FlowerDPConfig:
    """Public parameters of every round of the Flower path (the server sends them to the sampled clients).

    ``dim``: length of the flattened model update; ``clip`` C (L2, client level); ``noise_multiplier`` z: the
    m sampled clients' noise sums to std z C; ``mechanism``: ``"ddg"`` (discrete Gaussian) or ``"skellam"``;
    ``bits`` of the modulus q = 2^bits; ``sample_size`` m clients per round out of ``population`` N (the
    server samples m of the N nodes uniformly without replacement); ``threshold`` t and ``neighbours`` k
    (None: full graph) of the masking protocol; ``security`` ``"semi-honest"`` (default) or ``"active"``;
    ``delta`` of the reported certificates; ``k_stddevs`` and ``beta`` of the codec's scale rule;
    ``seed``: ``None`` (default) for a deployment, an int only for a reproducible simulation (it keys every
    client's rounding and noise and every protocol key: anyone who knows it can unmask and denoise everyone);
    ``min_roster``: the smallest roster a client accepts (:class:`~protocols.security.ClientPolicy`; the
    number of clients the deployment expects in a round, less the dropouts it plans for, at most m), required
    in active mode with ``neighbours`` set (an active SecAgg+ client needs it, see docs/secure-aggregation.md)
    and ``None`` (the threshold) otherwise.

    A client pinned to its own config (:func:`~simulations.flower.make_secagg_dp_mod`) runs the protocol with
    :meth:`client_policy` and refuses a server's round plan that :meth:`plan_refusal` finds unsafe.
    """

    dim: int
    clip: float
    noise_multiplier: float
    sample_size: int
    population: int
    threshold: int
    bits: int = 20
    mechanism: str = "ddg"
    neighbours: int | None = None
    security: str = "semi-honest"
    delta: float = 1e-5
    k_stddevs: float = 4.0
    beta: float = DEFAULT_BETA
    seed: int | None = None
    min_roster: int | None = None
    scale: float = field(init=False)
    sigma_int: float = field(init=False)

    def __post_init__(self) -> None:
        check_int("dim", self.dim, lo=1)
        check_real("clip", self.clip, lo=0.0, lo_open=True)
        check_real("noise_multiplier", self.noise_multiplier, lo=0.0, lo_open=True)
        check_int("population", self.population, lo=2)
        check_int("sample_size", self.sample_size, lo=2, hi=self.population)
        check_int("threshold", self.threshold, lo=2, hi=self.sample_size)
        zq.check_bits(self.bits, "bits")
        if self.mechanism not in MECHANISMS:
            raise ParameterError(f"Argument 'mechanism' must be one of {MECHANISMS}, not {self.mechanism!r}.")
        if self.neighbours is not None:
            check_int("neighbours", self.neighbours, lo=2)
        if self.security not in ("semi-honest", "active"):
            raise ParameterError(f"Argument 'security' must be 'semi-honest' or 'active', not {self.security!r}.")
        check_probability("delta", self.delta, allow_zero=False)
        check_real("k_stddevs", self.k_stddevs, lo=0.0, lo_open=True)
        if self.seed is not None:
            check_int("seed", self.seed, lo=0, hi=(1 << 63) - 1)
        if self.min_roster is not None:
            check_int("min_roster", self.min_roster, lo=2, hi=self.sample_size)
        self.client_policy()  # an active SecAgg+ config without min_roster: ParameterError naming it
        sigma_local = self.sigma_local
        try:
            scale = ZqCodec.scale_for(
                bits=self.bits,
                n_clients=self.sample_size,
                clip=self.clip,
                dim=self.dim,
                sigma=sigma_local,
                k=self.k_stddevs,
                beta=self.beta,
            )
        except ParameterError as exc:
            raise ParameterError(
                f"Argument 'bits' = {self.bits} is too small for {self.sample_size} clients of dimension {self.dim}: "
                f"{exc}"
            ) from exc
        # the samplers' range, capped as the simulator's plan caps it
        scale, inflation = sampler_capped_scale(
            scale, sigma=sigma_local, clip=self.clip, dim=self.dim, beta=self.beta, sigma_int_max=SIGMA_MAX
        )
        if inflation is not None and inflation > 2.0:  # the criterion ZqCodec.scale_for applies uncapped
            raise ParameterError(
                f"Argument 'noise_multiplier' = {self.noise_multiplier:g} is too large for the samplers: the grid "
                f"noise std is capped at {SIGMA_MAX:g}, which leaves scale {scale:.4g} and rounding inflates the L2 "
                f"sensitivity by x{inflation:.3g} (> 2). To fix, lower the noise multiplier or clip."
            )
        object.__setattr__(self, "scale", float(scale))
        object.__setattr__(self, "sigma_int", float(sigma_local * scale))

    @property
    def sigma_local(self) -> float:
        """Each client's noise std in model units, z C / sqrt(m)."""
        return self.noise_multiplier * self.clip / math.sqrt(self.sample_size)

    @property
    def codec(self) -> ZqCodec:
        """The Z_q codec every client and the server use (public rotation seed 0)."""
        return ZqCodec(self.dim, self.bits, self.clip, self.scale, rotation_seed=0, beta=self.beta)

    @property
    def round_neighbours(self) -> int | None:
        """The degree of the round's graph: ``neighbours``, or ``None`` (full graph) when k >= m - 1, as
        :func:`protocols.run_pooled_round` runs it for the m sampled clients."""
        k = self.neighbours
        return None if k is None or k >= self.sample_size - 1 else k

    def client_policy(self) -> ClientPolicy:
        """What a client pinned to this config enforces, whatever the server's plan says: its mode, its
        threshold as the minimum, the round's degree, ``min_roster`` and at most m clients per roster."""
        return ClientPolicy(
            security=self.security,
            min_threshold=self.threshold,
            neighbours=self.round_neighbours,
            min_roster=self.min_roster,
            max_clients=self.sample_size,
        )

    def plan_refusal(self, plan: RoundPlan) -> str | None:
        """Why a client pinned to this config refuses the server's round ``plan`` (None: it takes part).

        Refused: another security mode, modulus bits or (padded) dimension, another degree (a larger k at
        the same t needs fewer colluders), a lower threshold, a lower ``min_roster`` than ours, or a seed
        when ours is ``None`` (a seeded plan derives every key of the client from a number the server knows).
        The client enforces :meth:`client_policy` either way; the refusal makes the disagreement explicit."""
        own: list[tuple[str, object, object]] = [
            ("security", plan.security, self.security),
            ("bits", plan.bits, self.bits),
            ("dim", plan.dim, self.codec.padded_dim),
            ("neighbours", plan.neighbours, self.round_neighbours),
        ]
        for name, asked, pinned in own:
            if asked != pinned:
                return f"the server's round plan has {name} = {asked!r}; this client is pinned to {pinned!r}"
        if plan.threshold < self.threshold:
            return f"the server's round plan has threshold {plan.threshold} < the pinned {self.threshold}"
        if self.min_roster is not None and (plan.min_roster is None or plan.min_roster < self.min_roster):
            return f"the server's round plan has min_roster {plan.min_roster} < the pinned {self.min_roster}"
        if plan.seed is not None and self.seed is None:
            return "the server's round plan is seeded (its keys would follow from the seed); this client is not"
        return None

    def to_record(self) -> dict[str, Any]:
        """The fields as Flower ``ConfigRecord`` values (ints, floats, strings; ``None`` as -1 / absent)."""
        rec: dict[str, Any] = {
            "dim": self.dim,
            "clip": float(self.clip),
            "noise_multiplier": float(self.noise_multiplier),
            "sample_size": self.sample_size,
            "population": self.population,
            "threshold": self.threshold,
            "bits": self.bits,
            "mechanism": self.mechanism,
            "neighbours": -1 if self.neighbours is None else self.neighbours,
            "security": self.security,
            "delta": float(self.delta),
            "k_stddevs": float(self.k_stddevs),
            "beta": float(self.beta),
            "min_roster": -1 if self.min_roster is None else self.min_roster,
        }
        if self.seed is not None:
            rec["seed"] = self.seed
        return rec

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> FlowerDPConfig:
        """Inverse of :meth:`to_record` (the client rebuilds the codec and noise from the server's record)."""
        neighbours, min_roster = int(rec["neighbours"]), int(rec.get("min_roster", -1))
        return cls(
            dim=int(rec["dim"]),
            clip=float(rec["clip"]),
            noise_multiplier=float(rec["noise_multiplier"]),
            sample_size=int(rec["sample_size"]),
            population=int(rec["population"]),
            threshold=int(rec["threshold"]),
            bits=int(rec["bits"]),
            mechanism=str(rec["mechanism"]),
            neighbours=None if neighbours < 0 else neighbours,
            security=str(rec["security"]),
            delta=float(rec["delta"]),
            k_stddevs=float(rec["k_stddevs"]),
            beta=float(rec["beta"]),
            seed=int(rec["seed"]) if "seed" in rec else None,
            min_roster=None if min_roster < 0 else min_roster,
        )


def client_generator(seed: int | None, round_: int, key: int) -> np.random.Generator:
    """The generator of one client's rounding and noise in round ``round_``.

    ``seed=None``: a cryptographically strong default (:func:`secagg_dp.rng.resolve_rng`). An int seed
    (simulation only): AES-CTR (randomgen ``AESCounter``) keyed by ``SeedSequence(seed, spawn_key=(2, round,
    key))``, ``key`` the client's stable simulation key (Flower's partition id)."""
    if seed is None:
        from secagg_dp.rng import resolve_rng

        return resolve_rng(None)
    from randomgen import AESCounter

    seq = np.random.SeedSequence(seed, spawn_key=(2, check_int("round", round_, lo=0), check_int("key", key, lo=0)))
    return np.random.Generator(AESCounter(seq))


def encode_update(cfg: FlowerDPConfig, update: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One client's message to the aggregator: clip ``update`` to C, encode onto Z_q and add discrete noise.

    Returns uint64 residues mod 2^bits of length ``cfg.codec.padded_dim``: (x~ + z) mod q with x~ the
    conditionally rounded, rotated, scaled clipped update and z discrete Gaussian N_Z(0, sigma_int^2)
    (Canonne, Kamath & Steinke 2020) or symmetric Skellam of variance sigma_int^2 (Agarwal, Kairouz & Liu
    2021) per coordinate. The codec clips: an update above C is never trusted."""
    from simulations.clients import draw_noise

    codec = cfg.codec
    raw = np.asarray(update)
    if raw.dtype.kind not in "biuf":  # a complex update would lose its imaginary part with only a warning
        raise ParameterError(f"Argument 'update' must be a real numeric array, not dtype {raw.dtype}.")
    x = raw.astype(np.float64).reshape(-1)
    if x.size != cfg.dim:
        raise ParameterError(f"Argument 'update' must have {cfg.dim} entries (config 'dim'), not {x.size}.")
    noise = draw_noise(cfg.mechanism, cfg.sigma_int, codec.padded_dim, rng)
    return codec.encode(x, noise=noise, rng=rng)


def ideal_round(cfg: FlowerDPConfig, updates: Mapping[int, np.ndarray], round_: int) -> tuple[np.ndarray, np.ndarray]:
    """Our ideal mode for the same seed and inputs: each client's :func:`encode_update` with
    :func:`client_generator` (``cfg.seed``, ``round_``, the client's key), summed mod q without cryptography.
    ``updates`` maps each client's key (Flower's partition id) to its update. Returns (residues, decoded sum)."""
    codec = cfg.codec
    acc = np.zeros(codec.padded_dim, dtype=np.uint64)
    for key in sorted(updates):
        enc = encode_update(cfg, updates[key], client_generator(cfg.seed, round_, key))
        acc = zq.add_mod(acc, enc, cfg.bits)
    return acc, codec.decode(acc)


def round_event(cfg: FlowerDPConfig, included: int) -> Any:
    """The round as a privacy event for the check-in accountant and the ledger: a
    :class:`~secagg_dp.accounting.checkin.CheckinRound` with ``sample_size`` m (fixed-size sampling without
    replacement of m of the N nodes; replace-one, client level), amplified at rate m/N (Wang, Balle &
    Kasiviswanathan 2019, Thm 9 / the dominating pair of Zhu, Dong & Wang 2022 for Gaussian sums; the
    provider of :func:`~secagg_dp.accounting.checkin.checkin_provider`).

    ``included``: how many of the m clients' noised inputs reached the sum. If fewer than m did (dropouts
    independent of the data), the round's noise is that of ``included`` clients: the event keeps the rate
    m/N and gives each of m clients the grid std sigma_int sqrt(included/m), so the m-client base mechanism
    carries exactly the delivered total variance ``included`` sigma_int^2 (an under-delivered round costs
    more; :func:`~secagg_dp.accounting.checkin.underdelivered_epsilon` is the same arithmetic)."""
    from secagg_dp.accounting.checkin import CheckinRound, checkin_provider

    m = cfg.sample_size
    got = check_int("included", included, lo=1, hi=m)
    codec = cfg.codec
    sigma = cfg.sigma_int * math.sqrt(got / m)
    provider = checkin_provider(
        cfg.mechanism,
        cfg.population,
        sigma=sigma,
        l2_sensitivity=float(codec.l2_sensitivity),
        l1_sensitivity=float(codec.l1_sensitivity),
        dim=codec.padded_dim,
    )
    return CheckinRound(provider, cfg.population, gamma=None, sample_size=m, neighbouring="replace-one")


# ---- the round plan in a Flower record ---------------------------------------------------------------------


def plan_to_record(plan: RoundPlan) -> dict[str, Any]:
    """A :class:`~protocols.pool.RoundPlan` as ConfigRecord values (the seed as bytes: it may exceed int64)."""
    rec: dict[str, Any] = {
        "bits": plan.bits,
        "dim": plan.dim,
        "threshold": plan.threshold,
        "neighbours": -1 if plan.neighbours is None else plan.neighbours,
        "security": plan.security,
        "round_id": plan.round_id,
        "min_roster": -1 if plan.min_roster is None else plan.min_roster,
        "clients": plan.clients,
    }
    if plan.seed is not None:
        rec["seed"] = plan.seed.to_bytes(32, "big")
    return rec


def plan_from_record(rec: Mapping[str, Any]) -> RoundPlan:
    """Inverse of :func:`plan_to_record`."""
    neighbours, min_roster = int(rec["neighbours"]), int(rec["min_roster"])
    seed = rec.get("seed")
    return RoundPlan(
        bits=int(rec["bits"]),
        dim=int(rec["dim"]),
        threshold=int(rec["threshold"]),
        neighbours=None if neighbours < 0 else neighbours,
        security=str(rec["security"]),
        round_id=bytes(rec["round_id"]),
        seed=None if seed is None else int.from_bytes(bytes(seed), "big"),
        min_roster=None if min_roster < 0 else min_roster,
        clients=int(rec["clients"]),
    )


def pack_registry(keys: Mapping[int, bytes]) -> bytes:
    """Client id -> 32-byte identity key as bytes (uint32 id, key), ascending ids."""
    return b"".join(struct.pack(">I", c) + bytes(keys[c]) for c in sorted(keys))


def unpack_registry(data: bytes) -> dict[int, bytes]:
    """Inverse of :func:`pack_registry`."""
    row = 4 + 32
    if len(data) % row:
        raise ParameterError("Argument 'registry' must be a whole number of (id, key) rows.")
    return {struct.unpack(">I", data[i : i + 4])[0]: bytes(data[i + 4 : i + row]) for i in range(0, len(data), row)}
