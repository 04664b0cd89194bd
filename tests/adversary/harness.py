"""A malicious server for the tests: a real round with a programmable adversary and the invariant it must not break.

The adversary is an *active* server colluding with ``c`` corrupt clients (the threat model of
docs/secure-aggregation.md). It drives real :class:`~protocols.client.SecAggClient` objects stage by stage and
uses an honest :class:`~protocols.server.SecAggServer` as its engine: the engine collects the uplink and builds
the honest downlink (roster, share bundles, survivor lists), which the adversary then changes through a list of
**deviations** (:class:`Deviation` subclasses: rewrite any field of a decoded message and re-encode it, tamper
with raw bytes, withhold, duplicate, reorder or replay messages, equivocate, recommit a different survivor set,
inflate the survivor count, drop clients' replies, admit a hand-picked roster, inject an uplink message from
another execution). The unmask requests are built by the adversary itself, for each client from what that client
was shown and signed, with every valid survivor-set signature it holds and its colluders' signatures on any
statement (the strongest forwarding strategy), so a deviation earlier in the round is pursued to the end.

The corrupt clients run the honest code (a deviation can still rewrite what they are sent) and reveal their full
state to the adversary: inputs, noise seeds, self-mask seed and both X25519 key pairs, hence their channel keys,
pairwise seeds and every share box addressed to them.

:func:`check_invariant` then computes what the coalition holds and can compute, and lists every violation of:

* no honest client's self-mask seed b_v *and* mask key sk_v are both reconstructable (t shares each);
* every sum the coalition can unmask (a connected block of honest clients whose b_v it holds and whose
  pairwise masks cancel among themselves: the masking argument of Bonawitz et al. 2017, on the
  SecAgg+ graph of Bell et al. 2020; :func:`learnable_sums`) covers at least t - c honest clients, t the
  threshold the honest clients enforce and c the colluders, and keeps at least the noise the coalition
  certificate assumes: with add-then-remove enforcement level 0 (mu/N) of every honest client in it (computed
  from the clients' own noise draws); without enforcement the noise is part of each client's input and the sum
  is exact;
* the adversary's own unmasking of each such sum equals a Python-integer oracle (inputs plus the noise each
  client keeps), so the model of what is learnable is checked against a real attack;
* when every deviation is one an honest server must absorb (``honest_output``), the engine's released sum is
  exact over its survivors.

``check_invariant(run, strict_noise=True)`` adds the bound of docs/noise-enforcement.md (add-then-remove, Jiang,
Wang & Chen 2024): no learnable sum has noise groups removed beyond what the real dropouts allow, the colluders
and the documented SecAgg+ residual posing as survivors.

The adversary reads a few private attributes of the clients (what it sent them and what they signed, the box
senders they masked with): a test-only shortcut for bookkeeping the adversary could do from its own messages.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from protocols import messages as m
from protocols.client import SecAggClient
from protocols.graph import RosterGraph, holder_points, roster_graph, roster_graph_seed
from protocols.pki import KeyRegistry, create_identities
from protocols.pool import seeded_sources, simulated_noise_master
from protocols.security import ClientPolicy
from protocols.server import SecAggServer, survivor_lists
from protocols.stages import ClientStage
from secagg_dp.crypto import aead, masking, merkle, shamir, signing
from secagg_dp.crypto.keys import KeyPair, keypair_from_private
from secagg_dp.errors import AbortError, AuthenticationError, ProtocolError
from secagg_dp.noise import add_then_remove as atr

__all__ = [
    "STAGES",
    "Scenario",
    "Delivery",
    "Run",
    "Deviation",
    "Rewrite",
    "RewriteField",
    "Tamper",
    "Withhold",
    "Duplicate",
    "Reorder",
    "Misroute",
    "Replay",
    "Equivocate",
    "ClaimSurvivors",
    "CountInflation",
    "Exclude",
    "AdmitOnly",
    "HandPickRoster",
    "InjectUplink",
    "run_round",
    "Knowledge",
    "coalition_knowledge",
    "learnable_sums",
    "check_invariant",
    "oracle_sum",
]

#: The stages of an active round; a deviation's ``stage`` names the server -> client message of that stage
#: (RoundOpen, KeyRoster, ShareBundle, SurvivorList, UnmaskRequest) and the replies to it.
STAGES = ("advertise_keys", "share_keys", "masked_input", "consistency", "unmasking")
_PLEN = m.SharePlaintext.LEN
_HALF = shamir.PIECES_PER_32_BYTES


@dataclass(frozen=True)
class Scenario:
    """One round: clients ``first_id .. first_id + n - 1`` with seeded random inputs mod 2^bits, active mode,
    full graph (``neighbours=None``) or SecAgg+; ``dropouts[stage]`` are the clients silent from that stage on;
    ``colluders`` reveal their state to the server. ``min_roster="population"``: the clients expect every client
    that does not drop at check-in (what :func:`protocols.round.run_secagg_round` defaults to); ``None``: the
    :class:`~protocols.security.ClientPolicy` default."""

    n: int
    threshold: int
    neighbours: int | None = None
    noise: atr.NoiseSpec | None = None
    colluders: frozenset[int] = frozenset()
    dropouts: Mapping[str, frozenset[int]] = field(default_factory=dict)
    seed: int = 0
    round_id: bytes | None = None
    bits: int = 20
    dim: int = 3
    min_roster: int | str | None = "population"
    max_clients: int | None = None  # the population each client expects (None: n)
    first_id: int = 1
    inputs: Mapping[int, np.ndarray] | None = None  # client -> input mod 2^bits (None: seeded random inputs)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(range(self.first_id, self.first_id + self.n))

    def silent_from(self) -> dict[int, int]:
        """Client -> index in :data:`STAGES` of the first stage it does not answer."""
        out: dict[int, int] = {}
        for stage, who in self.dropouts.items():
            for c in who:
                out[c] = min(out.get(c, len(STAGES)), STAGES.index(stage))
        return out

    def policy(self) -> ClientPolicy:
        floor = self.min_roster
        if floor == "population":
            floor = max(2, self.n - len(self.dropouts.get("advertise_keys", ())))
        return ClientPolicy(
            security="active",
            min_threshold=self.threshold,
            neighbours=self.neighbours,
            min_roster=floor if isinstance(floor, int) else None,
            max_clients=max(2, self.n) if self.max_clients is None else self.max_clients,
        )


@dataclass(frozen=True)
class Delivery:
    """One server -> client message as the adversary hands it over (a broadcast is one Delivery per client)."""

    to: int
    payload: bytes = field(repr=False)


@dataclass
class _Corrupt:
    """What a corrupt client reveals: its input, noise master seed, both X25519 key pairs (from check-in on) and
    its self-mask seed (once it has shared its keys). Its channel key and pairwise seed with any client follow."""

    x: np.ndarray
    noise_master: bytes | None
    enc: KeyPair | None = None
    mask: KeyPair | None = None
    self_seed: bytes = b""

    def secrets(self, run: Run, me: int, peer: int) -> tuple[bytes, bytes]:
        """(channel key, pairwise seed s) with ``peer``, from our key pairs and the keys ``peer`` advertised."""
        if self.enc is None or self.mask is None or peer not in run.adverts:
            raise KeyError(peer)
        enc_pk, mask_pk = run.adverts[peer]
        ((ck, s),) = masking.neighbour_secrets(
            self.enc, self.mask, [(peer, enc_pk, mask_pk)], round_id=run.round_id, own_id=me
        )
        return ck, s


@dataclass
class Run:
    """Everything one adversarial round produced (and the state the deviations read while it runs)."""

    scenario: Scenario
    deviations: tuple[Deviation, ...]
    inputs: dict[int, np.ndarray]
    masters: dict[int, bytes]
    registry: KeyRegistry
    identities: dict[int, signing.SigningKey]
    engine: SecAggServer
    clients: dict[int, SecAggClient]
    stage: str = ""
    delivered: dict[str, list[Delivery]] = field(default_factory=dict)
    refusals: list[tuple[str, int, str]] = field(default_factory=list)
    server_reports: list[str] = field(default_factory=list)
    adverts: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    share_keys: dict[int, m.ShareKeys] = field(default_factory=dict)
    masked: dict[int, np.ndarray] = field(default_factory=dict)
    partners: dict[int, tuple[int, ...]] = field(default_factory=dict)
    sigs: dict[int, bytes] = field(default_factory=dict)
    requests: dict[int, m.UnmaskRequest] = field(default_factory=dict)
    responses: dict[int, m.UnmaskResponse] = field(default_factory=dict)
    uplink: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    corrupt: dict[int, _Corrupt] = field(default_factory=dict)
    aborted: str | None = None  # the engine's abort, if it aborted
    outcome_survivors: frozenset[int] | None = None
    outcome_aggregate: np.ndarray | None = None
    outcome_removed: tuple[int, ...] = ()

    @property
    def round_id(self) -> bytes:
        """The round id on the wire (the engine's: it may bind the scenario's label to a nonce per execution)."""
        return self.engine.round_id

    @property
    def honest(self) -> frozenset[int]:
        return frozenset(self.clients) - self.scenario.colluders

    @property
    def colluders(self) -> frozenset[int]:
        return self.scenario.colluders

    def refused(self, stage: str | None = None) -> dict[int, str]:
        """Client -> why it refused a message (of ``stage``, or of any stage)."""
        return {c: why for s, c, why in self.refusals if stage is None or s == stage}

    def schedule(self, roster: int) -> atr.NoiseSchedule | None:
        return None if self.scenario.noise is None else self.scenario.noise.schedule(roster)


# -- deviations -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Deviation:
    """One way the server departs from the protocol at ``stage``. Subclasses override any of three hooks:
    :meth:`before_close` (change what the engine collected before it builds this stage's downlink),
    :meth:`downlink` (change the stage's server -> client messages) and :meth:`uplink` (change the replies the
    server takes). ``honest_output``: an honest server must absorb this deviation (it is what a network or a
    faulty client could do), so the engine's released sum must stay exact."""

    stage: str
    honest_output: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, not {self.stage!r}")

    def before_close(self, run: Run) -> None:
        """Called before the engine builds this stage's downlink."""

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        return out

    def uplink(self, run: Run, replies: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        return replies


def _hit(targets: frozenset[int] | None, to: int) -> bool:
    return targets is None or to in targets


#: The kind of each stage's server -> client message.
K = m.Kind
STAGE_KIND = dict(
    zip(STAGES, (K.ROUND_OPEN, K.KEY_ROSTER, K.SHARE_BUNDLE, K.SURVIVOR_LIST, K.UNMASK_REQUEST), strict=True)
)


def _edit(stage: str, d: Delivery, change: Callable[[Any], Any]) -> Delivery:
    """``d`` with its message replaced by ``change(decoded message)``, re-encoded; unchanged if it is not a
    well-formed message of the stage's kind (a replayed or tampered one) or the change cannot be encoded (a
    field out of its range: raw tampering is :class:`Tamper`'s job)."""
    try:
        msg = m.decode(d.payload)
        if msg.KIND is not STAGE_KIND[stage]:
            return d
        return Delivery(d.to, change(msg).to_bytes())
    except ProtocolError:
        return d


def _set(**fields: Any) -> Callable[[Any], Any]:
    return lambda msg: dataclasses.replace(msg, **fields)


@dataclass(frozen=True)
class Rewrite(Deviation):
    """Decode the message to each target, replace it with ``fn(message, run, recipient)`` and re-encode: any
    change of several fields at once (e.g. signers with their signatures)."""

    fn: Callable[[Any, Run, int], Any] = field(default=lambda msg, run, to: msg)
    targets: frozenset[int] | None = None

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        res = []
        for d in out:
            if _hit(self.targets, d.to):

                def change(msg: Any, to: int = d.to) -> Any:
                    return self.fn(msg, run, to)

                d = _edit(self.stage, d, change)
            res.append(d)
        return res


@dataclass(frozen=True)
class RewriteField(Deviation):
    """Decode the message to each target, set ``field`` to ``fn(old value, run, recipient)``, re-encode. The
    server signs nothing, so nothing is re-signed; rewrites that must stay committed use :class:`ClaimSurvivors`."""

    field: str = ""
    fn: Callable[[Any, Run, int], Any] = dataclasses.field(default=lambda v, run, to: v)
    targets: frozenset[int] | None = None

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        res = []
        for d in out:
            if _hit(self.targets, d.to):
                change = lambda msg, to=d.to: dataclasses.replace(  # noqa: E731
                    msg, **{self.field: self.fn(getattr(msg, self.field), run, to)}
                )
                d = _edit(self.stage, d, change)
            res.append(d)
        return res


@dataclass(frozen=True)
class Tamper(Deviation):
    """Flip the low bit of byte ``offset`` of the raw message to each target."""

    offset: int = -1
    targets: frozenset[int] | None = None

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        res = []
        for d in out:
            if _hit(self.targets, d.to):
                raw = bytearray(d.payload)
                raw[self.offset % len(raw)] ^= 1
                d = Delivery(d.to, bytes(raw))
            res.append(d)
        return res


@dataclass(frozen=True)
class Withhold(Deviation):
    """Send the targets nothing at this stage."""

    targets: frozenset[int] | None = None
    honest_output: ClassVar[bool] = True

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        return [d for d in out if not _hit(self.targets, d.to)]


@dataclass(frozen=True)
class Duplicate(Deviation):
    """Send each target its message twice."""

    targets: frozenset[int] | None = None
    honest_output: ClassVar[bool] = True

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        return out + [d for d in out if _hit(self.targets, d.to)]


@dataclass(frozen=True)
class Reorder(Deviation):
    """Deliver the stage's messages in a permuted order."""

    seed: int = 0
    honest_output: ClassVar[bool] = True

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        order = np.random.default_rng(self.seed).permutation(len(out))
        return [out[i] for i in order.tolist()]


@dataclass(frozen=True)
class Misroute(Deviation):
    """Also hand client ``b`` the message meant for client ``a``, for each (a, b) in ``pairs``."""

    pairs: tuple[tuple[int, int], ...] = ()
    honest_output: ClassVar[bool] = True

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        by_to = {d.to: d for d in out}
        return out + [Delivery(b, by_to[a].payload) for a, b in self.pairs if a in by_to]


@dataclass(frozen=True)
class Replay(Deviation):
    """Hand each target, at this stage, the message it was sent at the earlier stage ``source`` (again)."""

    source: str = "advertise_keys"
    targets: frozenset[int] | None = None
    honest_output: ClassVar[bool] = True

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        old = [d for d in run.delivered.get(self.source, []) if _hit(self.targets, d.to)]
        return out + old


@dataclass(frozen=True)
class Equivocate(Deviation):
    """Set ``field`` to ``value`` in the messages to the clients of ``group``, for each (group, value) in
    ``values_by_group`` (others unchanged): each group is shown its own version."""

    field: str = ""
    values_by_group: tuple[tuple[frozenset[int], Any], ...] = ()

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        res = []
        for d in out:
            for group, value in self.values_by_group:
                if d.to in group:
                    d = _edit(self.stage, d, _set(**{self.field: value}))
                    break
            res.append(d)
        return res


@dataclass(frozen=True)
class ClaimSurvivors(Deviation):
    """Consistency round: commit to the survivor set U3 + ``add`` - ``remove`` (a proper commitment on the
    engine's roster graph) and send the targets their part of it; two claims with disjoint targets are the
    split attack of Bonawitz et al. 2017, Sec. 6."""

    add: frozenset[int] = frozenset()
    remove: frozenset[int] = frozenset()
    targets: frozenset[int] | None = None

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        eng = run.engine
        claimed = (set(eng._u3) | set(self.add & eng._u1)) - set(self.remove)
        lists = survivor_lists(run.round_id, eng._graph, claimed)
        res = []
        for d in out:
            if _hit(self.targets, d.to) and d.to in claimed:
                d = Delivery(d.to, lists.message(d.to).to_bytes())
            res.append(d)
        return res


@dataclass(frozen=True)
class CountInflation(Deviation):
    """Consistency round: state the survivor count as ``value`` (or the honest count + ``delta``) to the
    targets, with the honest survivor bitmap (the count inflation attack on add-then-remove noise)."""

    stage: str = "consistency"
    delta: int = 0
    value: int | None = None
    targets: frozenset[int] | None = None

    def _inflate(self, msg: m.SurvivorList) -> m.SurvivorList:
        new = self.value if self.value is not None else msg.count + self.delta
        return dataclasses.replace(msg, count=max(0, new))

    def downlink(self, run: Run, out: list[Delivery]) -> list[Delivery]:
        res = []
        for d in out:
            if _hit(self.targets, d.to):
                d = _edit(self.stage, d, self._inflate)
            res.append(d)
        return res


@dataclass(frozen=True)
class Exclude(Deviation):
    """Discard the replies of ``clients`` at this stage: call them dropped."""

    clients: frozenset[int] = frozenset()
    honest_output: ClassVar[bool] = True

    def uplink(self, run: Run, replies: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        return [(c, b) for c, b in replies if c not in self.clients]


@dataclass(frozen=True)
class AdmitOnly(Deviation):
    """Build the roster from the check-ins of ``clients`` only (the others are left out), committed properly:
    with ``stage="share_keys"`` the hand-picked roster attack."""

    stage: str = "share_keys"
    clients: frozenset[int] = frozenset()
    honest_output: ClassVar[bool] = True

    def before_close(self, run: Run) -> None:
        for c in [c for c in run.engine._keys if c not in self.clients]:
            del run.engine._keys[c]


@dataclass(frozen=True)
class HandPickRoster(Deviation):
    """Admit a roster of ``size`` check-ins: ``victim``, every colluder and the fewest honest others, trying sets
    of honest others (grinding: each is a fresh committed graph) until every colluder is a neighbour of the
    victim on the SecAgg+ graph the roster commits to."""

    stage: str = "share_keys"
    victim: int = 0
    size: int = 0
    honest_output: ClassVar[bool] = True

    def before_close(self, run: Run) -> None:
        eng = run.engine
        must = set(run.colluders)
        others = sorted(c for c in eng._keys if c not in must and c != self.victim)
        for extra in itertools.combinations(others, self.size - 1 - len(must)):
            ids = sorted({self.victim, *must, *extra})
            if must <= _committed_graph(run, ids).neighbours(self.victim):
                break
        else:
            raise ValueError("no roster of that size puts every colluder next to the victim")
        for c in [c for c in eng._keys if c not in ids]:
            del eng._keys[c]


def _committed_graph(run: Run, ids: Sequence[int]) -> RosterGraph:
    """The graph an honest engine would commit to for a roster of ``ids`` (as in ``SecAggServer._close_keys``)."""
    keys = run.engine._keys
    rows = [np.frombuffer(b"".join(keys[u][j] for u in ids), dtype=np.uint8).reshape(len(ids), -1) for j in range(3)]
    root = merkle.MerkleTree(m.roster_leaves(ids, *rows)).root
    return roster_graph(ids, run.engine.k, roster_graph_seed(run.round_id, len(ids), root))


@dataclass(frozen=True)
class InjectUplink(Deviation):
    """Hand the server ``payload`` on ``sender``'s channel at this stage (e.g. a message recorded in another
    execution), in place of the sender's own reply if ``replace``."""

    sender: int = 0
    payload: bytes = field(default=b"", repr=False)
    replace: bool = True
    honest_output: ClassVar[bool] = True

    def uplink(self, run: Run, replies: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        kept = [(c, b) for c, b in replies if not (self.replace and c == self.sender)]
        return [*kept, (self.sender, self.payload)]


# -- the driver -----------------------------------------------------------------------------------------------
def _setup(sc: Scenario, deviations: Sequence[Deviation]) -> Run:
    round_id, csrc, ssrc, isrc = seeded_sources(sc.seed, sc.round_id)
    ids = sc.ids
    rng = np.random.default_rng([sc.seed, 77])
    inputs = {c: rng.integers(0, 1 << sc.bits, sc.dim, dtype=np.uint64) for c in ids}
    if sc.inputs is not None:
        inputs = {c: np.asarray(sc.inputs[c], dtype=np.uint64) if c in sc.inputs else inputs[c] for c in ids}
    masters = {c: simulated_noise_master(sc.seed, round_id, c) for c in ids} if sc.noise else {}
    registry, identities = create_identities(ids, isrc)
    engine = SecAggServer(
        bits=sc.bits,
        dim=sc.dim,
        threshold=sc.threshold,
        neighbours=sc.neighbours,
        registry=registry,
        round_id=round_id,
        source=ssrc,
        noise=sc.noise,
    )
    policy = sc.policy()
    clients = {
        c: SecAggClient(
            c,
            inputs[c],
            bits=sc.bits,
            policy=policy,
            identity=identities[c],
            registry=registry,
            source=csrc(c),
            noise=sc.noise,
            noise_master=masters.get(c),
        )
        for c in ids
    }
    run = Run(sc, tuple(deviations), inputs, masters, registry, identities, engine, clients)
    run.corrupt = {c: _Corrupt(inputs[c], masters.get(c)) for c in sc.colluders}
    return run


def _deliver(run: Run, stage: str, out: list[Delivery], silent: Mapping[int, int]) -> list[tuple[int, bytes]]:
    """Hand each delivery to its client (unless it is silent from this stage on); the replies, in order."""
    at = STAGES.index(stage)
    replies = []
    for d in out:
        if d.to not in run.clients or silent.get(d.to, len(STAGES)) <= at:
            continue
        c = run.clients[d.to]
        try:
            reply = c.receive(d.payload)
        except ProtocolError as e:
            run.refusals.append((stage, d.to, str(e)))
            continue
        if reply is None:
            continue
        replies.append((d.to, reply))
        _observe(run, c, reply, d.payload)
    return replies


def _observe(run: Run, c: SecAggClient, reply: bytes, request: bytes) -> None:
    """What the adversary records of a reply (by its kind: a client may answer a replayed or late message of
    an earlier stage) and, for a colluder, of its state."""
    u, msg = c.id, m.decode(reply)
    if isinstance(msg, m.AdvertiseKeys):
        run.adverts[u] = (msg.enc_pk, msg.mask_pk)
        if u in run.corrupt:
            run.corrupt[u].enc, run.corrupt[u].mask = c._enc, c._mask
    elif isinstance(msg, m.ShareKeys):
        run.share_keys[u] = msg
        if u in run.corrupt:
            run.corrupt[u].self_seed = c._self_seed
    elif isinstance(msg, m.MaskedInput):
        run.masked[u] = msg.y.copy()
        run.partners[u] = tuple(c._box_ids.tolist())
    elif isinstance(msg, m.SurvivorSignature):
        run.sigs[u] = msg.signature
    elif isinstance(msg, m.UnmaskResponse):
        req = m.decode(request)  # the request it answered: which noise group its noise shares belong to
        assert isinstance(req, m.UnmaskRequest)
        run.requests[u], run.responses[u] = req, msg


def _feed(run: Run, stage: str, replies: list[tuple[int, bytes]]) -> None:
    run.uplink[stage] = replies
    for u, b in replies:
        try:
            run.engine.receive(b, sender=u)
        except ProtocolError as e:
            run.server_reports.append(f"{stage}: server refused a message from {u}: {e}")


def _requests(run: Run) -> list[Delivery]:
    """The adversary's unmask requests: for each client that signed its survivor list, the clients that shared
    keys with it split by the survivor set it signed, every signature valid on its statement from the
    survivors it can see (the colluders sign any statement), and the first noise group its signed count
    allows to remove."""
    out = []
    for u, c in sorted(run.clients.items()):
        if c.stage is not ClientStage.SURVIVORS_SIGNED:
            continue
        known = set(c._box_ids.tolist()) | {u}
        seen = set(c._survivors.tolist())
        alive, gone = known & seen, known - seen
        statement = c._statement
        signers, rows = [], []
        for v in sorted(seen):
            if v in run.colluders:
                sig = run.identities[v].sign(signing.LABEL_SURVIVOR_SET, statement)
            elif v in run.sigs:
                sig = run.sigs[v]
                try:
                    run.registry.verify(v, signing.LABEL_SURVIVOR_SET, statement, sig)
                except AuthenticationError:
                    continue
            else:
                continue
            signers.append(v)
            rows.append(sig)
        group = 0
        sched = c._noise_sched
        if sched is not None:
            d = min(max(c._n - c._signed_count, 0), c._n)
            removable = sched.removable(d)
            group = min(removable) if removable else 0
        arr = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, m.SIG_LEN).copy()
        req = m.UnmaskRequest(run.round_id, m.SERVER, u, tuple(sorted(alive)), tuple(sorted(gone)), tuple(signers), arr)
        if group:
            req = dataclasses.replace(req, noise_group=group)
        out.append(Delivery(u, req.to_bytes()))
    return out


def _downlink(run: Run, stage: str) -> list[Delivery]:
    eng = run.engine
    if stage == "advertise_keys":
        raw = [(m.BROADCAST, eng.open_round())]
    elif stage == "unmasking":
        eng.advance()  # the engine closes the consistency round (its own requests are replaced below)
        return _requests(run)
    else:
        raw = eng.advance()
    out = []
    for to, b in raw:
        for c in sorted(run.clients) if to == m.BROADCAST else [to]:
            out.append(Delivery(c, b))
    return out


def run_round(scenario: Scenario, deviations: Sequence[Deviation] = ()) -> Run:
    """Run one round of ``scenario`` with the adversary applying ``deviations``; never raises for a protocol
    fault (refusals are recorded in :attr:`Run.refusals`, an engine abort in :attr:`Run.aborted`)."""
    run = _setup(scenario, deviations)
    silent = scenario.silent_from()
    for stage in STAGES:
        run.stage = stage
        mine = [d for d in run.deviations if d.stage == stage]
        for dev in mine:
            dev.before_close(run)
        try:
            out = _downlink(run, stage)
        except AbortError as e:
            if stage != "unmasking":
                run.aborted = str(e)
                return run
            run.aborted = str(e)  # the engine stops; the adversary still asks for shares
            out = _requests(run)
        for dev in mine:
            out = dev.downlink(run, out)
        run.delivered[stage] = out
        replies = _deliver(run, stage, out, silent)
        for dev in mine:
            replies = dev.uplink(run, replies)
        if run.aborted is None:
            _feed(run, stage, replies)
        else:
            run.uplink[stage] = replies
    if run.aborted is None:
        try:
            run.engine.advance()
        except (AbortError, ProtocolError) as e:
            run.aborted = str(e)
        else:
            done = run.engine.outcome
            if done is not None:
                run.outcome_survivors = done.survivors
                run.outcome_aggregate = done.aggregate.copy()
                run.outcome_removed = done.noise_removed
    return run


# -- what the coalition holds -------------------------------------------------------------------------------------
@dataclass
class Knowledge:
    """Shares of honest clients' secrets the coalition holds, by owner and holder: self-mask seeds ``b``, mask
    keys ``sk``, and noise-group seeds ``noise[owner][group]``; and from them what it can reconstruct."""

    threshold: dict[int, int]
    points: dict[int, dict[int, int]]
    b: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)
    sk: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)
    noise: dict[int, dict[int, dict[int, np.ndarray]]] = field(default_factory=dict)

    def has(self, table: dict[int, dict[int, np.ndarray]], v: int) -> bool:
        return v in self.threshold and len(table.get(v, {})) >= self.threshold[v]

    def lowest_group(self, v: int) -> int | None:
        """The lowest noise group of ``v`` whose seed is reconstructable (it gives every group above it)."""
        got = [g for g, rows in self.noise.get(v, {}).items() if len(rows) >= self.threshold.get(v, 1 << 30)]
        return min(got) if got else None

    def secret(self, table: dict[int, dict[int, np.ndarray]], v: int) -> bytes:
        t = self.threshold[v]
        holders = sorted(table[v])[:t]
        rows = np.stack([table[v][h] for h in holders])
        return shamir.decode(shamir.reconstruct([self.points[v][h] for h in holders], rows, threshold=t))


def coalition_knowledge(run: Run) -> Knowledge:
    """Every share of an honest client's secret that reached the coalition: the boxes addressed to colluders
    (opened with their channel keys) and the honest clients' unmask responses."""
    know = Knowledge({}, {})
    for v, sk in run.share_keys.items():
        if v in run.colluders:
            continue
        know.threshold[v] = run.clients[v]._t
        know.points[v] = holder_points(sorted({*sk.recipients, v}))
        for h, box in zip(sk.recipients, sk.boxes, strict=True):
            mate = run.corrupt.get(h)
            if mate is None:
                continue
            try:
                pt = aead.open_sealed(mate.secrets(run, h, v)[0], box, aead.associated_data(run.round_id, v, h))
            except (AuthenticationError, KeyError):
                continue
            plain = m.SharePlaintext.from_bytes(pt[:_PLEN])
            know.b.setdefault(v, {})[h] = plain.self_share
            know.sk.setdefault(v, {})[h] = plain.key_share
            tail = np.frombuffer(pt[_PLEN:], dtype=">u4").astype(np.uint32).reshape(-1, m.NOISE_PIECES)
            for g in range(tail.shape[0]):
                know.noise.setdefault(v, {}).setdefault(g + 1, {})[h] = tail[g]
    for h, resp in run.responses.items():
        group = run.requests[h].noise_group if h in run.requests else 0
        for o, row in zip(resp.self_owners, resp.self_shares, strict=True):
            if o not in run.colluders:
                know.b.setdefault(o, {})[h] = row
        for o, row in zip(resp.key_owners, resp.key_shares, strict=True):
            if o not in run.colluders:
                know.sk.setdefault(o, {})[h] = row
        for o, row in zip(resp.noise_owners, resp.noise_shares, strict=True):
            if o not in run.colluders and group:
                know.noise.setdefault(o, {}).setdefault(group, {})[h] = row
    return know


def learnable_sums(run: Run, know: Knowledge) -> list[frozenset[int]]:
    """The finest sums of honest inputs the coalition can unmask, as sets of honest clients.

    y_v = x_v + z_v + PRG(b_v) + sum over v's box senders w of +-PRG(s_vw). A combination sum a_v y_v reveals
    something about the inputs only if every unknown mask cancels: PRG(b_v) is unknown unless b_v is
    reconstructable, so a_v = 0 then; s_vw between two honest clients is unknown unless sk_v or sk_w is
    reconstructable, and cancels only between y_v and y_w with a_v = a_w, both masked with it. So the learnable
    sums are the connected components, under the unknown pairwise masks, of the honest clients whose masked
    input the server holds and whose b_v it can reconstruct, after removing (repeatedly) every client with an
    unknown pairwise mask that no other such client cancels."""
    honest = run.honest
    bad_k = {v for v in honest if know.has(know.sk, v)}
    cand = {v for v in honest if v in run.masked and know.has(know.b, v) and v not in bad_k}

    def unknown(v: int) -> list[int]:
        return [w for w in run.partners.get(v, ()) if w in honest and w not in bad_k]

    changed = True
    while changed:
        changed = False
        for v in sorted(cand):
            if any(w not in cand or v not in run.partners.get(w, ()) for w in unknown(v)):
                cand.discard(v)
                changed = True
    parent = {v: v for v in cand}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for v in cand:
        for w in unknown(v):
            parent[find(v)] = find(w)
    comps: dict[int, set[int]] = {}
    for v in cand:
        comps.setdefault(find(v), set()).add(v)
    return [frozenset(c) for c in sorted(comps.values(), key=min)]


def _kept(run: Run, v: int, lowest: int | None) -> tuple[tuple[int, ...] | None, float]:
    """(the groups client v keeps, as ``keep`` for :func:`~secagg_dp.noise.add_then_remove.client_noise`, and
    its kept variance) when the groups from ``lowest`` up are removed."""
    sched = run.clients[v]._noise_sched
    if sched is None:
        return None, 0.0
    keep = tuple(range(1, sched.groups + 1 if lowest is None else lowest))
    return keep, sched.base_variance + sum(sched.group_variances[g - 1] for g in keep)


def oracle_sum(run: Run, clients: Sequence[int], lowest: Mapping[int, int | None]) -> list[int]:
    """Python-integer oracle: sum over ``clients`` of the input plus the noise each keeps (level 0 and the groups
    below ``lowest[v]``, regenerated from its own master seed), mod 2^bits."""
    sc = run.scenario
    total = [0] * sc.dim
    for v in clients:
        vals = [int(a) for a in run.inputs[v]]
        sched = run.clients[v]._noise_sched
        if sc.noise is not None and v in run.masters and sched is not None:
            keep, _ = _kept(run, v, lowest.get(v))
            z = atr.client_noise(sched, run.masters[v], sc.dim, keep=keep)
            vals = [a + int(b) for a, b in zip(vals, z, strict=True)]
        total = [a + b for a, b in zip(total, vals, strict=True)]
    return [a % (1 << sc.bits) for a in total]


def _pair_seed(run: Run, know: Knowledge, v: int, w: int) -> bytes:
    """s_vw for v in a learnable sum and w outside it, which the coalition knows: w colludes, or sk_w is
    reconstructable (else v would not be in a learnable sum)."""
    if w in run.corrupt:
        return run.corrupt[w].secrets(run, w, v)[1]
    kp = keypair_from_private(know.secret(know.sk, w))
    return masking.pairwise_seed(kp, run.adverts[v][1], round_id=run.round_id, own_id=w, peer_id=v)


def _unmask(run: Run, know: Knowledge, comp: frozenset[int]) -> list[int]:
    """The adversary's own unmasking of the sum of ``comp``: y_v less PRG(b_v), the pairwise masks it knows
    and the noise groups it can regenerate."""
    sc = run.scenario
    total = [0] * sc.dim
    for v in sorted(comp):
        pairwise = [(_pair_seed(run, know, v, w), masking.mask_sign(v, w)) for w in run.partners[v] if w not in comp]
        mask = masking.mask_input(
            np.zeros(sc.dim, np.uint64), bits=sc.bits, self_seed=know.secret(know.b, v), pairwise=pairwise
        )
        vals = [int(a) - int(b) for a, b in zip(run.masked[v], mask, strict=True)]
        g, sched = know.lowest_group(v), run.clients[v]._noise_sched
        if g is not None and sched is not None:
            seed = _noise_secret(know, v, g)
            gone = atr.removed_noise(sched, atr.chain_from(seed, g, sched.groups), sc.dim)
            vals = [a - int(b) for a, b in zip(vals, gone, strict=True)]
        total = [a + b for a, b in zip(total, vals, strict=True)]
    return [a % (1 << sc.bits) for a in total]


def _noise_secret(know: Knowledge, v: int, g: int) -> bytes:
    t = know.threshold[v]
    rows = know.noise[v][g]
    holders = sorted(rows)[:t]
    pieces = shamir.reconstruct([know.points[v][h] for h in holders], np.stack([rows[h] for h in holders]), threshold=t)
    return shamir.decode(pieces)


def check_invariant(run: Run, *, strict_noise: bool = False) -> list[str]:
    """Every way ``run`` broke the invariant of the module docstring (empty: it held)."""
    sc = run.scenario
    out: list[str] = []
    know = coalition_knowledge(run)
    for v in sorted(run.honest):
        if know.has(know.b, v) and know.has(know.sk, v):
            out.append(f"coalition holds t shares of both b and sk of honest client {v}")
    allowed = sc.threshold - len(run.colluders)
    lowest = {v: know.lowest_group(v) for v in run.honest}
    for comp in learnable_sums(run, know):
        if len(comp) < allowed:
            out.append(f"coalition can unmask a sum of {len(comp)} < t - c = {allowed} honest clients {sorted(comp)}")
        if sc.noise is not None:
            scheds = [run.clients[v]._noise_sched for v in comp]
            kept = sum(_kept(run, v, lowest[v])[1] for v in comp)
            floor = sum(sch.base_variance for sch in scheds if sch is not None)
            if kept < floor * (1 - 1e-12):
                out.append(f"sum of {sorted(comp)} keeps noise variance {kept} < level 0 ({floor})")
            if strict_noise:
                out.extend(_strict_noise(run, comp, lowest))
        try:
            got = _unmask(run, know, comp)
        except (ProtocolError, KeyError, ValueError) as e:
            out.append(f"adversary could not unmask the learnable sum {sorted(comp)}: {e!r}")
            continue
        want = oracle_sum(run, sorted(comp), lowest)
        if got != want:
            out.append(f"unmasked sum of {sorted(comp)} is {got}, oracle {want}")
    if run.outcome_aggregate is not None and all(d.honest_output for d in run.deviations):
        surv = run.outcome_survivors or frozenset()
        if len(surv & run.honest) < allowed:
            out.append(f"engine released a sum over {len(surv & run.honest)} < {allowed} honest clients")
        removed = {v: (min(run.outcome_removed) if run.outcome_removed else None) for v in surv}
        want = oracle_sum(run, sorted(surv), removed)
        if run.outcome_aggregate.tolist() != want:
            out.append(f"engine released {run.outcome_aggregate.tolist()}, oracle over its survivors {want}")
    return out


def _strict_noise(run: Run, comp: frozenset[int], lowest: Mapping[int, int | None]) -> list[str]:
    """docs/noise-enforcement.md: the groups removed from a sum are at most those the real dropouts d allow,
    where the server may count as survivors (so d = N - |those|) the honest clients whose masked input arrived,
    every colluder in the roster (outside the honest-client model) and the documented residual
    (docs/secure-aggregation.md, "What active mode does not prevent"): roster members with no honest neighbour
    whose masked input arrived (no signer holds their shares and their masks never entered the sum, so nobody
    can tell they did not survive)."""
    eng = run.engine
    arrived = {u for u in run.masked if u in run.honest}
    counted = arrived | {c for c in run.colluders if c in run.adverts}
    graph = getattr(eng, "_graph", None)
    if graph is not None:
        for u in graph.ids.tolist():
            if not (graph.neighbours(u) & arrived):
                counted.add(u)
    out = []
    for v in sorted(comp):
        sched = run.clients[v]._noise_sched
        g = lowest[v]
        if sched is None or g is None:
            continue
        d = min(max(sched.roster - len(counted), 0), sched.roster)
        ok = sched.removable(d)
        if not ok or g < min(ok):
            out.append(
                f"noise group {g} of client {v} is removable, but d = {d} real dropouts allow only "
                f"{'groups >= ' + str(min(ok)) if ok else 'none'}"
            )
    return out
