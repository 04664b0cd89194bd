"""Bytes on the wire of one round, per client, stage and direction, counted where envelopes are sent.

:class:`CommunicationMeter` is fed every batch of envelopes a party hands the transport (before any fault
rule drops, delays or tampers with them) and adds ``len(payload)``, the size of the encoded message, to
the sender's upload (client -> server) or the recipient's download (server -> client) at that stage. A
broadcast is stored once per stage and charged, when :meth:`CommunicationMeter.result` is called, to every
client the server addresses it to: the clients whose message of the previous stage was sent (for the
stage that opens the round, the clients that answer it). Memory is O(clients): one row of per-stage counts
per client, no record per message. Transport framing (TCP/TLS headers) is not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from protocols.stages import STAGE_NAMES
from protocols.wire import BROADCAST, SERVER
from secagg_dp.errors import ProtocolError

__all__ = ["Communication", "CommunicationMeter", "STAGE_ORDER"]

#: Every stage a round may have, in protocol order (semi-honest rounds skip ``"consistency"``).
STAGE_ORDER: tuple[str, ...] = tuple(STAGE_NAMES)
_INDEX = {s: i for i, s in enumerate(STAGE_ORDER)}


class _Sized(Protocol):  # what the meter reads of an envelope (protocols.transport.Envelope)
    @property
    def sender(self) -> int: ...
    @property
    def recipient(self) -> int: ...
    @property
    def payload(self) -> bytes: ...


@dataclass(frozen=True)
class Communication:
    """Bytes each client sent and received in one round.

    ``clients``: ascending ids of the clients that sent at least one message (the round's participants);
    ``upload[i, j]``: bytes client ``clients[i]`` sent to the server in stage ``stages[j]``;
    ``download[i, j]``: bytes the server sent to it in that stage (its share of broadcasts included).
    """

    stages: tuple[str, ...]
    clients: np.ndarray = field(repr=False)
    upload: np.ndarray = field(repr=False)
    download: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        shape = (len(self.clients), len(self.stages))
        if self.clients.ndim != 1 or self.upload.shape != shape or self.download.shape != shape:
            raise ProtocolError(
                f"Communication: upload {self.upload.shape} and download {self.download.shape} must both have "
                f"shape (clients, stages) = {shape}"
            )
        if any(s not in _INDEX for s in self.stages):
            raise ProtocolError(f"Communication: unknown stage in {self.stages}; expected names from {STAGE_ORDER}")

    @property
    def upload_bytes(self) -> np.ndarray:
        """Total bytes each client sent, all stages (int64, aligned with ``clients``)."""
        return np.asarray(self.upload.sum(axis=1), dtype=np.int64)

    @property
    def download_bytes(self) -> np.ndarray:
        """Total bytes each client received, all stages (int64, aligned with ``clients``)."""
        return np.asarray(self.download.sum(axis=1), dtype=np.int64)

    def of(self, client: int) -> dict[str, dict[str, int]]:
        """One client's bytes: ``{"upload": {stage: bytes}, "download": {stage: bytes}}``."""
        i = int(np.searchsorted(self.clients, client))
        if i == len(self.clients) or int(self.clients[i]) != client:
            raise ProtocolError(f"client {client} sent no message this round")
        return {
            "upload": {s: int(self.upload[i, j]) for j, s in enumerate(self.stages)},
            "download": {s: int(self.download[i, j]) for j, s in enumerate(self.stages)},
        }

    def summary(self) -> dict[str, Any]:
        """Mean and max bytes per participating client, all stages and per stage (JSON-ready numbers)."""

        def stats(up: np.ndarray, down: np.ndarray) -> dict[str, float | int]:
            empty = up.size == 0
            return {
                "upload_bytes_mean": 0.0 if empty else float(up.mean()),
                "upload_bytes_max": 0 if empty else int(up.max()),
                "download_bytes_mean": 0.0 if empty else float(down.mean()),
                "download_bytes_max": 0 if empty else int(down.max()),
            }

        out: dict[str, Any] = {"clients": len(self.clients), **stats(self.upload_bytes, self.download_bytes)}
        out["stages"] = {s: stats(self.upload[:, j], self.download[:, j]) for j, s in enumerate(self.stages)}
        return out


class CommunicationMeter:
    """Adds up the encoded size of every envelope sent in a round (see the module docstring)."""

    def __init__(self) -> None:
        self._row: dict[int, int] = {}
        self._up = np.zeros((0, len(STAGE_ORDER)), dtype=np.int64)
        self._down = np.zeros((0, len(STAGE_ORDER)), dtype=np.int64)
        self._broadcast = np.zeros(len(STAGE_ORDER), dtype=np.int64)
        self._seen: list[int] = []  # stage indices in the order the round went through them

    def _rows(self, ids: list[int]) -> np.ndarray:
        row = self._row
        for c in ids:
            if c not in row:
                row[c] = len(row)
        if len(row) > len(self._up):  # grow geometrically: amortised O(1) per client
            cap = max(len(row), 2 * len(self._up), 64)
            for name in ("_up", "_down"):
                old = getattr(self, name)
                new = np.zeros((cap, len(STAGE_ORDER)), dtype=np.int64)
                new[: len(old)] = old
                setattr(self, name, new)
        return np.fromiter((row[c] for c in ids), dtype=np.int64, count=len(ids))

    def count(self, phase: str, envelopes: Iterable[_Sized]) -> None:
        """Count the envelopes sent in ``phase`` (``"<stage>:down"``: server to clients, ``"<stage>:up"``)."""
        stage, _, direction = phase.rpartition(":")
        if stage not in _INDEX or direction not in ("down", "up"):
            raise ProtocolError(f"unknown phase {phase!r}; expected '<stage>:down' or '<stage>:up'")
        s = _INDEX[stage]
        if s not in self._seen:
            self._seen.append(s)
        ids: list[int] = []
        sizes: list[int] = []
        for env in envelopes:
            who = env.sender if direction == "up" else env.recipient
            if direction == "down" and who == BROADCAST:
                self._broadcast[s] += len(env.payload)
            elif who not in (SERVER, BROADCAST):
                ids.append(int(who))
                sizes.append(len(env.payload))
        if ids:
            rows = self._rows(ids)  # may grow the tables: pick one after
            table = self._up if direction == "up" else self._down
            np.add.at(table[:, s], rows, np.asarray(sizes, dtype=np.int64))

    def result(self) -> Communication:
        """The round's :class:`Communication` so far (participants: the clients that sent anything)."""
        n = len(self._row)
        up, down = self._up[:n], self._down[:n].copy()
        for i, s in enumerate(self._seen):
            if self._broadcast[s]:
                sent = up[:, self._seen[i - 1] if i else s] > 0  # the server's current set of clients
                down[sent, s] += self._broadcast[s]
        ids = np.fromiter(self._row, dtype=np.int64, count=n)
        keep = up.sum(axis=1) > 0
        order = np.argsort(ids[keep], kind="stable")
        cols = sorted(self._seen)
        return Communication(
            stages=tuple(STAGE_ORDER[j] for j in cols),
            clients=ids[keep][order],
            upload=up[keep][order][:, cols],
            download=down[keep][order][:, cols],
        )
