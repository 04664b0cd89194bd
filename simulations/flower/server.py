"""The server side of the Flower path: :class:`SecAggDPWorkflow` drives our protocol over Flower's messages.

One round (:meth:`SecAggDPWorkflow.run_round`): sample m of the N connected nodes uniformly without replacement,
number them 1..m (ascending node id), and run :func:`protocols.run_pooled_round` on a
:class:`FlowerClientPool`, a :class:`protocols.ClientPool` whose clients are the sampled Flower nodes: each
stage's downlink envelopes go to each node in one ``train`` message (the ``"secagg-dp"`` ConfigRecord holds the
payloads and their positions in the stage's delivery order) and the replies come back with those positions, so
the seeded transport orders them exactly as the in-process pool does. A node that does not answer (no reply, or
a Flower error) is silent from that stage on, as a dropout. The unmasked sum is decoded with the codec, the round
is spent in the :class:`~secagg_dp.accounting.PrivacyLedger` *before* the result is returned (a spend refused by
the budget releases nothing), and the server observer's certificate is kept by a
:class:`~secagg_dp.accounting.checkin.CheckinAccountant`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from protocols import Envelope, KeyRegistry, RoundPlan, run_pooled_round
from protocols.pool import Reply, merge, seeded_sources
from secagg_dp.errors import ParameterError, ProtocolError
from simulations.flower.accountant import admit_round, load_state, save_state, workflow_accountant
from simulations.flower.client import RECORD
from simulations.flower.core import FlowerDPConfig, pack_registry, plan_to_record, round_event

__all__ = ["FlowerClientPool", "FlowerRound", "SecAggDPWorkflow"]


def _message(content: Mapping[str, Any], node: int, round_: int, arrays: Any = None) -> Any:
    from flwr.app import ConfigRecord, Message, RecordDict

    records: dict[str, Any] = {RECORD: ConfigRecord(dict(content))}
    if arrays is not None:
        records["arrays"] = arrays
    return Message(RecordDict(records), dst_node_id=node, message_type="train", group_id=str(round_))


class FlowerClientPool:
    """The sampled Flower nodes as a :class:`protocols.ClientPool` (client id i is ``nodes[i - 1]``).

    ``grid``: the ServerApp's Flower ``Grid``; ``arrays``: the ``ArrayRecord`` the clients train from (sent
    with the ``"start"`` message); ``timeout``: seconds per stage (None: wait for every reply)."""

    def __init__(
        self,
        grid: Any,
        nodes: Sequence[int],
        cfg: FlowerDPConfig,
        round_: int,
        arrays: Any,
        *,
        timeout: float | None = None,
    ) -> None:
        self.grid, self.cfg, self.round, self.arrays, self.timeout = grid, cfg, round_, arrays, timeout
        self.nodes = {i + 1: int(n) for i, n in enumerate(nodes)}
        self.silent: set[int] = set()  # clients that failed to answer (silent from then on)
        self._plan: dict[str, Any] = {}

    def _exchange(self, contents: Mapping[int, Mapping[str, Any]], arrays: Any = None) -> dict[int, Any]:
        """Send each client its message; the ConfigRecord of each reply that arrived without an error."""
        by_node = {self.nodes[c]: c for c in contents}
        msgs = [_message(body, self.nodes[c], self.round, arrays) for c, body in contents.items()]
        out: dict[int, Any] = {}
        for reply in self.grid.send_and_receive(msgs, timeout=self.timeout):
            cid = by_node.get(int(reply.metadata.src_node_id))
            if cid is None or reply.has_error() or RECORD not in reply.content.config_records:
                continue
            out[cid] = reply.content.config_records[RECORD]
        self.silent |= set(contents) - set(out)
        return out

    def _base(self, plan: RoundPlan, cid: int, stage: str) -> dict[str, Any]:
        return {"stage": stage, "cid": cid, "round": self.round, **{f"plan.{k}": v for k, v in self._plan.items()}}

    def identities(self, plan: RoundPlan) -> dict[int, bytes]:
        """Ask every sampled node for its Ed25519 identity key (active mode)."""
        self._plan = plan_to_record(plan)
        got = self._exchange({c: self._base(plan, c, "identity") for c in self.nodes})
        if set(got) != set(self.nodes):
            raise ProtocolError(f"{len(self.nodes) - len(got)} sampled node(s) did not send an identity key")
        return {c: bytes(r["identity"]) for c, r in got.items()}

    def start(self, plan: RoundPlan, registry: KeyRegistry | None, silent_from: Mapping[int, str]) -> None:
        """Send each node the model, the round's parameters and the registry; each trains, encodes and noises."""
        self._plan = plan_to_record(plan)
        reg = pack_registry(registry.keys) if registry is not None else b""
        cfg = {f"cfg.{k}": v for k, v in self.cfg.to_record().items()}
        self.silent |= set(silent_from)
        bodies = {
            c: {**self._base(plan, c, "start"), **cfg, "registry": reg} for c in self.nodes if c not in self.silent
        }
        self._exchange(bodies, self.arrays)

    def deliver(self, stage: str, envelopes: Sequence[Envelope]) -> tuple[list[Envelope], list[str]]:
        """Each node's envelopes (a broadcast to all) in one message; the replies merged in delivery order."""
        from protocols import messages as m

        per: dict[int, tuple[list[int], list[bytes]]] = {}
        for pos, env in enumerate(envelopes):
            for cid in self.nodes if env.recipient == m.BROADCAST else [env.recipient]:
                if cid in self.nodes and cid not in self.silent:
                    per.setdefault(cid, ([], []))
                    per[cid][0].append(pos)
                    per[cid][1].append(env.payload)
        got = self._exchange(
            {c: {"stage": stage, "positions": p, "payloads": b} for c, (p, b) in per.items()},
        )
        replies: list[Reply] = []
        for cid, r in got.items():
            replies += [(int(pos), cid, bytes(b)) for pos, b in zip(r["replied"], r["replies"], strict=True)]
            replies += [(int(pos), cid, str(t)) for pos, t in zip(r["refused_at"], r["refused"], strict=True)]
        return merge([replies])


@dataclass(frozen=True)
class FlowerRound:
    """One released round: ``mean`` update (decoded sum / ``included``), the decoded ``sum``, the unmasked
    ``aggregate`` (residues mod 2^bits), the ``nodes`` sampled, how many noised inputs were ``included``, the
    analyst's and the server's certified epsilon after this round (at ``delta``) and the protocol's ``reports``."""

    mean: np.ndarray = field(repr=False)
    sum: np.ndarray = field(repr=False)
    aggregate: np.ndarray = field(repr=False)
    nodes: tuple[int, ...]
    included: int
    epsilon: float
    server_epsilon: float
    delta: float
    reports: tuple[str, ...] = ()


class SecAggDPWorkflow:
    """Drives our secure aggregation with distributed discrete noise over a Flower ``Grid`` (module docstring).

    ``cfg``: the public parameters (:class:`~simulations.flower.core.FlowerDPConfig`); ``ledger_path``: an
    SQLite file for the :class:`~secagg_dp.accounting.PrivacyLedger` (None: in memory); ``epsilon_budget``:
    refuse (``PrivacyBudgetExceeded``) a round whose spend would exceed it at ``cfg.delta``; ``timeout``:
    seconds per stage; ``accountant_path``: a JSON file for ``accountant``, a
    :class:`~simulations.flower.accountant.SecAggDPAccountant` (Flower's ``PrivacyAccountant`` protocol), loaded
    on start if it exists and saved after every round; before a round starts, ``accountant.would_exceed`` is asked
    for its worst case against ``epsilon_budget`` and the round is refused (``PrivacyBudgetExceeded``, nothing
    sent). The ledger composes the analyst's view (RDP of the round's
    :class:`~secagg_dp.accounting.checkin.CheckinRound`); ``server_accountant`` the server's (it chose the
    sample, so its view is the revealed-participation mixture, see docs/flower.md)."""

    def __init__(
        self,
        cfg: FlowerDPConfig,
        *,
        ledger_path: str | Path | None = None,
        epsilon_budget: float | None = None,
        timeout: float | None = None,
        accountant_path: str | Path | None = None,
    ) -> None:
        from secagg_dp.accounting import PrivacyLedger
        from secagg_dp.accounting.checkin import CheckinAccountant
        from simulations.privacy import ORDERS

        if not isinstance(cfg, FlowerDPConfig):
            raise TypeError(f"Argument 'cfg' must be a FlowerDPConfig, not {type(cfg).__name__}.")
        self.cfg, self.timeout = cfg, timeout
        self.ledger = PrivacyLedger(
            "replace-one",
            ORDERS,
            path=ledger_path,
            epsilon_budget=epsilon_budget,
            delta=None if epsilon_budget is None else cfg.delta,
        )
        self.server_accountant = CheckinAccountant("rdp", "replace-one", orders=ORDERS, observer="server")
        self.epsilon_budget, self.accountant_path = epsilon_budget, accountant_path
        self.accountant = workflow_accountant(cfg)  # the budget is policy, not state: a run may change it
        if accountant_path is not None:
            load_state(self.accountant, accountant_path)

    def sample(self, grid: Any, round_: int) -> list[int]:
        """m of the connected nodes, uniformly without replacement (``secrets.SystemRandom``; seeded: numpy),
        in ascending node id."""
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if len(nodes) != self.cfg.population:
            raise ParameterError(
                f"Argument 'cfg.population' = {self.cfg.population} must be the number of nodes, {len(nodes)}: the "
                "certificate's sampling rate is m/N."
            )
        if self.cfg.seed is None:
            chosen = secrets.SystemRandom().sample(nodes, self.cfg.sample_size)
        else:
            rng = np.random.default_rng([self.cfg.seed, round_])
            chosen = [nodes[i] for i in rng.choice(len(nodes), self.cfg.sample_size, replace=False)]
        return sorted(chosen)

    def run_round(self, grid: Any, arrays: Any, round_: int) -> FlowerRound:
        """Sample, train, encode, noise, mask, unmask, decode and spend one round (module docstring)."""
        cfg = self.cfg
        # refuses (nothing sent) a round whose worst case the protocol lets finish would exceed the budget
        admit_round(self.accountant, cfg, round_, self.epsilon_budget)
        nodes = self.sample(grid, round_)
        pool = FlowerClientPool(grid, nodes, cfg, round_, arrays, timeout=self.timeout)
        seed = round_id = None
        if cfg.seed is not None:  # simulation only: every key of the round follows from (seed, round)
            seed = int.from_bytes(hashlib.sha256(b"secagg-dp/flower" + bytes(f"{cfg.seed}/{round_}", "ascii")).digest())
            round_id = seeded_sources(seed)[0]
        res = run_pooled_round(
            pool,
            sorted(pool.nodes),
            cfg.codec.padded_dim,
            bits=cfg.bits,
            threshold=cfg.threshold,
            neighbours=cfg.neighbours,
            security=cfg.security,
            seed=seed,
            round_id=round_id,
            min_roster=cfg.threshold if cfg.min_roster is None else cfg.min_roster,  # what a pinned client expects
        )
        included = len(res.survivors)
        event = round_event(cfg, included)
        self.ledger.spend(event)  # before anything is released; raises PrivacyBudgetExceeded over budget
        self.server_accountant.compose(event)
        self.accountant.compose(event)
        if self.accountant_path is not None:
            save_state(self.accountant, self.accountant_path)
        decoded = cfg.codec.decode(res.aggregate)
        return FlowerRound(
            mean=decoded / included,
            sum=decoded,
            aggregate=res.aggregate,
            nodes=tuple(nodes),
            included=included,
            epsilon=float(self.ledger.epsilon(cfg.delta)[0]),
            server_epsilon=float(self.server_accountant.get_epsilon(cfg.delta)),
            delta=cfg.delta,
            reports=res.reports,
        )

    def close(self) -> None:
        """Close the ledger (its file, if any)."""
        self.ledger.close()
