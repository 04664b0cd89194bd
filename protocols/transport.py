"""In-process transport with a seeded scheduler and a fault injector, for reproducible simulations.

Each phase the driver hands the transport the envelopes sent in that phase; :meth:`InProcessTransport.deliver`
returns them in a scheduler-chosen order after applying the fault rules: drop, tamper (flip one byte),
delay (deliver in the next phase of the same direction instead) and inject (replay any bytes, e.g. a message
recorded in another round). Every envelope ever delivered is kept in :attr:`log` so tests can replay it
elsewhere (unless the transport is made with ``keep_log=False``, as :func:`~protocols.round.run_secagg_round`
does: a round's messages total O(n k) share boxes and n survivor lists, which the log would keep alive to the
end).
Phases are named ``"<stage>:down"`` (server to clients) and ``"<stage>:up"`` (clients to server) for the
stages ``advertise_keys``, ``share_keys``, ``masked_input``, ``consistency`` (active mode only), ``unmasking``.
An envelope's ``sender`` is the channel identity the transport authenticated; the driver hands it to the
server, which refuses a message naming another sender. The transport's :attr:`~InProcessTransport.meter`
counts the encoded bytes of every envelope sent, per client, stage and direction
(:mod:`protocols.communication`; O(clients) memory, kept whether or not the log is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from protocols.communication import Communication, CommunicationMeter
from protocols.messages import Kind, peek_kind
from secagg_dp.errors import ProtocolError
from secagg_dp.rng import resolve_rng

__all__ = ["Envelope", "FaultInjector", "InProcessTransport", "LazyEnvelopes", "PHASES"]

PHASES = tuple(
    f"{s}:{d}"
    for s in ("advertise_keys", "share_keys", "masked_input", "consistency", "unmasking")
    for d in ("down", "up")
)


@dataclass(frozen=True)
class Envelope:
    sender: int
    recipient: int
    payload: bytes = field(repr=False)

    @property
    def kind(self) -> Kind | None:
        try:
            return peek_kind(self.payload)
        except ProtocolError:
            return None


Match = Callable[[Envelope], bool]


class LazyEnvelopes(Sequence[Envelope]):
    """Envelopes from one ``sender`` whose payloads are built when an entry is read: entry i is
    ``Envelope(sender, recipients[order[i]], build(order[i]))``. A driver wraps a stage's per-client downlink
    in one (e.g. the server's :class:`~protocols.server.DeferredOutgoing`) so that at most the messages a pool
    is handling exist at once; :meth:`InProcessTransport.deliver` hands back a reordered view and meters each
    entry when it is first read. ``build`` must give the same bytes on every call."""

    def __init__(
        self,
        sender: int,
        recipients: Sequence[int],
        build: Callable[[int], bytes],
        *,
        order: Sequence[int] | np.ndarray | None = None,
        on_read: Callable[[Envelope], None] | None = None,
    ) -> None:
        self.sender = sender
        self.recipients = tuple(recipients)
        self.build = build
        self.order = np.arange(len(self.recipients)) if order is None else np.asarray(order, dtype=np.int64)
        self._on_read = on_read
        self._read = np.zeros(len(self.order), dtype=bool)

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, i: int) -> Envelope: ...
    @overload
    def __getitem__(self, i: slice) -> list[Envelope]: ...
    def __getitem__(self, i: int | slice) -> Envelope | list[Envelope]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        j = int(self.order[i])
        env = Envelope(self.sender, self.recipients[j], self.build(j))
        if self._on_read is not None and not self._read[i]:
            self._read[i] = True
            self._on_read(env)
        return env

    def __iter__(self) -> Iterator[Envelope]:
        for i in range(len(self)):
            yield self[i]

    def reordered(self, order: Sequence[int] | np.ndarray, on_read: Callable[[Envelope], None] | None) -> LazyEnvelopes:
        """Entry i of the result is entry ``order[i]`` of this one; ``on_read`` is called on each entry's
        first read."""
        return LazyEnvelopes(
            self.sender,
            self.recipients,
            self.build,
            order=self.order[np.asarray(order, dtype=np.int64)],
            on_read=on_read,
        )

    def settle(self) -> None:
        """Read (and so meter) every entry not read yet."""
        for i in np.flatnonzero(~self._read).tolist():
            self[i]


def _match(kind: Kind | None, sender: int | None, recipient: int | None) -> Match:
    def f(env: Envelope) -> bool:
        return (
            (kind is None or env.kind is kind)
            and (sender is None or env.sender == sender)
            and (recipient is None or env.recipient == recipient)
        )

    return f


@dataclass
class FaultInjector:
    """Rules applied by the transport. Each ``add_*`` method matches on message kind, sender and recipient."""

    drops: list[Match] = field(default_factory=list)
    tampers: list[tuple[Match, Callable[[bytes], bytes]]] = field(default_factory=list)
    delays: list[Match] = field(default_factory=list)
    injections: dict[str, list[Envelope]] = field(default_factory=dict)

    def drop(
        self, kind: Kind | None = None, *, sender: int | None = None, recipient: int | None = None
    ) -> FaultInjector:
        self.drops.append(_match(kind, sender, recipient))
        return self

    def tamper(
        self,
        kind: Kind | None = None,
        *,
        sender: int | None = None,
        recipient: int | None = None,
        offset: int = -1,
        fn: Callable[[bytes], bytes] | None = None,
    ) -> FaultInjector:
        """Flip the low bit of the byte at ``offset`` (default: the last byte), or apply ``fn``."""

        def flip(b: bytes) -> bytes:
            arr = bytearray(b)
            arr[offset] ^= 1
            return bytes(arr)

        self.tampers.append((_match(kind, sender, recipient), fn or flip))
        return self

    def delay(
        self, kind: Kind | None = None, *, sender: int | None = None, recipient: int | None = None
    ) -> FaultInjector:
        """Hold matching envelopes back to the next phase in the same direction (they arrive a stage late)."""
        self.delays.append(_match(kind, sender, recipient))
        return self

    def inject(self, phase: str, envelope: Envelope) -> FaultInjector:
        """Deliver ``envelope`` (e.g. a replay) during ``phase``."""
        if phase not in PHASES:
            raise ProtocolError(f"unknown phase {phase!r}; expected one of {PHASES}")
        self.injections.setdefault(phase, []).append(envelope)
        return self


class InProcessTransport:
    """Delivers envelopes phase by phase in an order drawn from ``rng`` (a simulation generator: it only
    schedules, it never touches keys or masks)."""

    def __init__(
        self, *, rng: np.random.Generator | None = None, faults: FaultInjector | None = None, keep_log: bool = True
    ) -> None:
        self._rng = resolve_rng(rng)
        self.keep_log = bool(keep_log)
        self.faults = faults or FaultInjector()
        self._held: dict[str, list[Envelope]] = {"down": [], "up": []}  # per direction
        self.log: list[tuple[str, Envelope]] = []
        self.meter = CommunicationMeter()
        self._pending: list[LazyEnvelopes] = []  # lazy deliveries whose entries are metered when read

    def communication(self) -> Communication:
        """Bytes each client sent and received so far, per stage (what the parties sent, before faults)."""
        self._settle()
        return self.meter.result()

    def _settle(self) -> None:
        while self._pending:
            self._pending.pop().settle()

    @overload
    def deliver(self, phase: str, sent: list[Envelope]) -> list[Envelope]: ...
    @overload
    def deliver(self, phase: str, sent: Sequence[Envelope]) -> Sequence[Envelope]: ...
    def deliver(self, phase: str, sent: Sequence[Envelope]) -> Sequence[Envelope]:
        """The envelopes to hand over in ``phase``: ``sent`` (counted by :attr:`meter`) after the fault
        rules, with the held-back and injected ones, in a seeded order.

        A :class:`LazyEnvelopes` with no fault rule, held-back or injected envelope and no log comes back as
        a lazy view in the same seeded order (each payload built when the pool reads it, metered on first
        read; entries never read are metered at the next ``deliver`` or :meth:`communication`): the same
        order, bytes and counts as the list it stands for."""
        self._settle()
        f = self.faults
        direction = phase.rsplit(":", 1)[-1]
        if (
            isinstance(sent, LazyEnvelopes)
            and not self.keep_log
            and not (f.drops or f.tampers or f.delays or f.injections.get(phase))
            and not self._held[direction]
        ):
            self.meter.count(phase, [])  # the stage is seen now, as for a list
            order = self._rng.permutation(len(sent))  # the draw the list path makes for a batch of this length
            view = sent.reordered(order, lambda env: self.meter.count(phase, [env]))
            self._pending.append(view)
            return view
        sent = list(sent)
        self.meter.count(phase, sent)
        batch = self._held[direction] + list(f.injections.get(phase, []))
        self._held[direction] = []
        for env in sent:
            if any(d(env) for d in f.drops):
                continue
            for match, fn in f.tampers:
                if match(env):
                    env = Envelope(env.sender, env.recipient, fn(env.payload))
            if any(d(env) for d in f.delays):
                self._held[direction].append(env)
                continue
            batch.append(env)
        order = self._rng.permutation(len(batch))
        out = [batch[i] for i in order]
        if self.keep_log:
            self.log.extend((phase, e) for e in out)
        return out
