"""Add-then-remove noise enforcement (docs/noise-enforcement.md; Dordis, Jiang, Wang & Chen 2024, Sec. 4) as a
collaborator of the two protocol state machines.

:class:`ClientEnforcement` and :class:`ServerEnforcement` hold everything a round's noise enforcement adds to
:class:`~protocols.client.SecAggClient` and :class:`~protocols.server.SecAggServer`: the schedule (a function
of the roster size N), the group seeds' Shamir shares appended to each share box, the commitment to the top
group's seed, the noise added to the masked input, the check of the group a server asks to remove, and the
server's reconstruction, commitment check, regeneration and subtraction. A state machine holds one of them
when its round has a :class:`~secagg_dp.noise.add_then_remove.NoiseSpec` and ``None`` otherwise, and calls the
hooks below at the roster, the share boxes, the masked input and the unmasking.

The refusals that also apply to a round without enforcement (a share box or ShareKeys carrying noise data, a
request or response naming a noise group) are module functions taking the collaborator or ``None``:
:func:`box_tail`, :func:`check_commitment`, :func:`check_noise_owners`, :func:`read_tails`,
:func:`requested_group`.

Each hook refuses with :class:`~secagg_dp.errors.ProtocolError` (what a peer or the server sent is wrong;
the state machine changes nothing before the hook returns) and states its contract in its docstring. Bad
constructor arguments (``noise``, ``noise_master``) raise TypeError / ParameterError from the ``of``
constructors, as the state machines' constructors did before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from protocols import messages as m
from secagg_dp.crypto import shamir
from secagg_dp.crypto.randomness import RandomSource
from secagg_dp.errors import ParameterError, ProtocolError
from secagg_dp.noise import add_then_remove as atr
from secagg_dp.zq import add_mod, sub_mod, wrap_int64

__all__ = [
    "ClientEnforcement",
    "ServerEnforcement",
    "box_tail",
    "asked_group",
    "check_commitment",
    "check_noise_owners",
    "read_tails",
    "requested_group",
]

_Verify = Callable[[int, bytes], bool]  # (owner, reconstructed secret) -> whether it is the committed one
# (owners, verify) -> {owner: secret}: the server's batched, verified Shamir reconstruction from one share table
Reconstruct = Callable[[list[int], _Verify], dict[int, bytes]]


def _tail_len(schedule: atr.NoiseSchedule) -> int:
    """Bytes of noise-seed shares after the share plaintext in each box: G groups of NOISE_PIECES uint32."""
    return 4 * m.NOISE_PIECES * schedule.groups


def _scheduled(schedule: atr.NoiseSchedule | None) -> atr.NoiseSchedule:
    """The schedule, which the roster fixes before any hook that needs it (unreachable otherwise)."""
    if schedule is None:
        raise ProtocolError("the noise schedule is fixed by the roster")
    return schedule


class ClientEnforcement:
    """One client's add-then-remove noise: it adds level 0 and every removable group to its masked input, and
    Shamir-shares the group seeds with the holders of its self-mask seed b_u (same points, same threshold).

    ``master`` (32 bytes, simulation only) fixes the seeds; ``None``: drawn from the client's source at the
    share boxes. The schedule is known from the roster (:meth:`on_roster`)."""

    def __init__(self, spec: atr.NoiseSpec, master: bytes | None) -> None:
        self.spec, self._master = spec, master
        self.schedule: atr.NoiseSchedule | None = None
        self.tail = 0  # bytes of noise-seed shares after the share plaintext in each box (0: none)
        self._own: np.ndarray | None = None  # our own share of each group seed, (G * NOISE_PIECES,) uint32

    @classmethod
    def of(cls, spec: atr.NoiseSpec | None, master: bytes | None) -> ClientEnforcement | None:
        """The collaborator for a client constructed with ``noise=spec, noise_master=master``, or ``None``
        without a spec. Refuses a ``spec`` that is not a NoiseSpec (TypeError) and a ``master`` that is not 32
        bytes (ParameterError), the latter whether or not a spec is given."""
        if spec is not None and not isinstance(spec, atr.NoiseSpec):
            raise TypeError(f"Argument 'noise' must be a NoiseSpec or None, not {type(spec).__name__}.")
        if master is not None and (not isinstance(master, bytes) or len(master) != 32):
            raise ParameterError("Argument 'noise_master' must be 32 bytes (or None: drawn from 'source').")
        return None if spec is None else cls(spec, master)

    # -- roster and share boxes ---------------------------------------------------------------------------
    def on_roster(self, n: int) -> None:
        """The roster of ``n`` clients is checked: fix the schedule (N = n, D = floor(tau N)). Refuses nothing."""
        self.schedule = self.spec.schedule(n)

    def share_boxes(
        self,
        plaintexts: list[bytes],
        points: Sequence[int],
        mine: int,
        *,
        threshold: int,
        round_id: bytes,
        owner: int,
        source: RandomSource,
    ) -> tuple[list[bytes], bytes]:
        """Append to each holder's share plaintext its Shamir shares of the group seeds 1..G (at ``points``,
        one per plaintext, with ``threshold``; ``mine`` is our own row) and return the plaintexts with the
        commitment SHA-256(label, round, owner, seed of group G) (:func:`atr.noise_commitment`); b"" and the
        plaintexts unchanged when G = 0. Draws the master seed from ``source`` first when none was given, then
        the Shamir coefficients (the order fixes a seeded round's bytes). Called once, after :meth:`on_roster`."""
        sched = _scheduled(self.schedule)
        master = self._master if self._master is not None else source.bytes(atr.MASTER_SEED_LEN)
        self._master = master
        if not sched.groups:
            return plaintexts, b""
        seeds = atr.level_seeds(master, sched.groups)
        nsh = shamir.share(seeds[1:], threshold=threshold, points=list(points), source=source)
        tails = nsh.astype(">u4").tobytes()
        w = self.tail = nsh.shape[1] * 4
        self._own = nsh[mine].copy()
        boxed = [pt + tails[j * w : (j + 1) * w] for j, pt in enumerate(plaintexts)]
        return boxed, atr.noise_commitment(seeds[-1], round_id=round_id, owner=owner)

    # -- masked input -------------------------------------------------------------------------------------
    def add_noise(self, blocks: Iterable[np.ndarray], dim: int, bits: int) -> Iterator[np.ndarray]:
        """The input blocks (consecutive, covering ``dim`` values) plus our noise z (level 0 and every group,
        :func:`atr.client_noise`, wrapped to Z_{2^bits}) in Z_{2^bits}, block by block. z is drawn now."""
        if self.schedule is None or self._master is None:  # unreachable after the share boxes
            raise ProtocolError("noise is added only after the share boxes are made")
        z = wrap_int64(atr.client_noise(self.schedule, self._master, dim), bits)
        at = 0
        for xb in blocks:
            yield add_mod(xb, z[at : at + xb.size], bits)
            at += xb.size

    # -- unmasking ----------------------------------------------------------------------------------------
    def reveal(
        self, client: int, group: int, peers: Sequence[tuple[int, np.ndarray]]
    ) -> tuple[list[int], list[np.ndarray]]:
        """The shares of group ``group``'s seed we reveal (none for group 0): our own first, then, in order,
        each surviving peer's from ``peers`` ((owner, its (G, NOISE_PIECES) rows from :func:`read_tails`)).
        Forgets our own shares afterwards (the round is over for us). ProtocolError if a group is asked of a
        client that shared no seeds (:func:`requested_group` refuses that first)."""
        owners: list[int] = []
        out: list[np.ndarray] = []
        if group:
            own = self._own
            if own is None:
                raise ProtocolError(f"client {client}: no noise-seed shares to reveal")
            owners.append(client)
            out.append(own.reshape(-1, m.NOISE_PIECES)[group - 1])
            for v, rows in peers:
                owners.append(v)
                out.append(rows[group - 1])
        self._own = None
        return owners, out


class ServerEnforcement:
    """The server's side of add-then-remove noise: it asks the survivors for the lowest group whose every
    level lies above the dropout count, reconstructs each survivor's seed of that group, checks it against the
    survivor's commitment (chained up to the top group G), regenerates the groups g..G and subtracts them from
    the sum in Z_{2^bits}."""

    def __init__(self, spec: atr.NoiseSpec) -> None:
        self.spec = spec
        self.schedule: atr.NoiseSchedule | None = None
        self.tail = 0  # bytes of noise-seed shares expected after each share plaintext
        self.group = 0  # the group asked of every responder (0: none)
        self._commitments: dict[int, bytes] = {}
        self._seeds: dict[int, bytes] = {}

    @classmethod
    def of(cls, spec: atr.NoiseSpec | None) -> ServerEnforcement | None:
        """The collaborator for a server constructed with ``noise=spec`` (``None`` without one); TypeError if
        ``spec`` is not a NoiseSpec."""
        if spec is not None and not isinstance(spec, atr.NoiseSpec):
            raise TypeError(f"Argument 'noise' must be a NoiseSpec or None, not {type(spec).__name__}.")
        return None if spec is None else cls(spec)

    # -- roster and share boxes ---------------------------------------------------------------------------
    def on_roster(self, n: int) -> None:
        """The roster has ``n`` entries: fix the schedule (as every client does from its roster) and the box
        tail length. Refuses nothing."""
        self.schedule = self.spec.schedule(n)
        self.tail = _tail_len(self.schedule)

    def record_commitment(self, u: int, commitment: bytes) -> None:
        """Keep client ``u``'s commitment to its top group seed (checked by :func:`check_commitment`)."""
        if commitment:
            self._commitments[u] = commitment

    # -- unmasking ----------------------------------------------------------------------------------------
    def choose_group(self, dropouts: int) -> int:
        """The group to ask for at ``dropouts`` = d = N - |U3| (|U3| as the clients count it): the lowest
        group whose every level lies above d (:meth:`NoiseSchedule.removable`), 0 if none. Refuses nothing
        (``dropouts`` outside [0, N] is a ParameterError of the schedule)."""
        sched = _scheduled(self.schedule)
        removable = sched.removable(dropouts)
        self.group = min(removable) if removable else 0
        return self.group

    def short(self, counts: Callable[[int], int], survivors: Iterable[int], threshold: int) -> list[int]:
        """Survivors with fewer than ``threshold`` shares of the asked group's seed (``counts(u)``); none when
        no group is asked. The server aborts on them before reconstructing anything."""
        if not self.group:
            return []
        return [u for u in survivors if counts(u) < threshold]

    def reconstruct(self, survivors: list[int], round_id: bytes, reconstruct: Reconstruct) -> int:
        """Reconstruct each survivor's seed of the asked group with the server's verified reconstruction from
        the noise-seed share table (``reconstruct``), a seed being accepted only if it chains
        (:func:`atr.chain_from`) to a top seed that opens the survivor's commitment; returns the number of seeds
        (0 when no group is asked). A bad share is repaired, or the round aborted, by ``reconstruct``."""
        group, sched = self.group, self.schedule
        if not group or sched is None:
            return 0
        top = sched.groups
        self._seeds = reconstruct(
            survivors,
            lambda u, s: (
                atr.noise_commitment(atr.chain_from(s, group, top)[top], round_id=round_id, owner=u)
                == self._commitments.get(u)
            ),
        )
        return len(self._seeds)

    def remove(self, total: np.ndarray, dim: int, bits: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """Subtract the survivors' groups g..G, regenerated from the reconstructed seeds
        (:func:`atr.removed_noise`), from the unmasked sum in Z_{2^bits}; returns the sum and the groups removed
        (``RoundOutcome.noise_removed``; () and the sum unchanged when nothing was reconstructed)."""
        sched, group = self.schedule, self.group
        if not self._seeds or sched is None:
            return total, ()
        excess = np.zeros(dim, dtype=np.int64)
        for u in sorted(self._seeds):
            excess += atr.removed_noise(sched, atr.chain_from(self._seeds[u], group, sched.groups), dim)
        return sub_mod(total, wrap_int64(excess, bits), bits), tuple(range(group, sched.groups + 1))


# -- checks that apply with or without enforcement --------------------------------------------------------
def box_tail(enf: ClientEnforcement | ServerEnforcement | None) -> int:
    """Bytes of noise-seed shares after the share plaintext in each box: 0 without enforcement or with G = 0."""
    return 0 if enf is None else enf.tail


def asked_group(enf: ServerEnforcement | None) -> int:
    """The noise group the server asks of every responder (0: none)."""
    return 0 if enf is None else enf.group


def check_commitment(enf: ServerEnforcement | None, u: int, commitment: bytes) -> None:
    """ShareKeys from ``u`` carries a noise commitment exactly when the round's boxes carry noise-seed shares;
    ProtocolError otherwise (before anything of the message is kept)."""
    if bool(commitment) != bool(box_tail(enf)):
        raise ProtocolError(f"client {u} sent a noise commitment where none is expected, or none")


def check_noise_owners(enf: ServerEnforcement | None, u: int, owners: Sequence[int]) -> None:
    """An UnmaskResponse from ``u`` carries noise-seed shares only if a group was asked; ProtocolError otherwise.
    (Which owners may appear is checked with the self-mask shares: the same survivors.)"""
    if owners and not asked_group(enf):
        raise ProtocolError(f"client {u} sent noise-seed shares that were not asked for")


def read_tails(enf: ClientEnforcement | None, tails: list[bytes], ok: np.ndarray) -> list[np.ndarray]:
    """Each opened box's noise-seed shares as (G, NOISE_PIECES) rows; a box whose tail is not exactly
    :func:`box_tail` bytes, or holds a value outside GF(p), is marked not ok in ``ok`` (reported as failed, like
    a malformed share plaintext). Without enforcement every tail must be empty."""
    sched = None if enf is None else enf.schedule
    groups = sched.groups if sched is not None else 0
    width = box_tail(enf)
    out = []
    for i, tail in enumerate(tails):
        if len(tail) != width:
            ok[i] = False
            out.append(np.zeros((groups, m.NOISE_PIECES), dtype=np.uint32))
            continue
        arr = np.frombuffer(tail, dtype=">u4").astype(np.uint32).reshape(groups, m.NOISE_PIECES)
        if arr.size and int(arr.max()) >= shamir.PRIME:
            ok[i] = False
        out.append(arr)
    return out


def requested_group(
    enf: ClientEnforcement | None,
    client: int,
    g: int,
    *,
    active: bool,
    full: bool,
    roster: int,
    signed: int,
    listed: int,
    phantoms: Callable[[], set[int]],
) -> int:
    """The noise group g an UnmaskRequest asks client ``client`` to reveal (0: none), refused unless the
    client added that group and every group g..G lies above the dropout count d: active mode d = N - |U3|
    with |U3| the count it signed in the consistency round (``signed``); semi-honest full graph
    d = N - |survivors listed| (``listed``); semi-honest SecAgg+ sees only its neighbourhood and trusts the
    server's d (a trusted server). d above the tolerance D allows no removal. Active mode first refuses a
    signed survivor set that counts one of the client's share holders that never sent it a share box
    (``phantoms()``: such clients; their inputs cannot be in the sum, and counting them would shrink d).
    ProtocolError on each refusal, naming the group and d; a group asked of a client without enforcement
    (``enf`` None) is refused too."""
    if not g:
        return 0
    sched = None if enf is None else enf.schedule
    if sched is None or not sched.groups or g > sched.groups:
        raise ProtocolError(f"client {client}: request names noise group {g}, which we did not add")
    d: int | None
    if active:
        phantom = phantoms()
        if phantom:
            raise ProtocolError(
                f"client {client}: refusing to reveal noise seeds: the signed survivor set counts client "
                f"{min(phantom)}, which never shared keys with us"
            )
        d = roster - signed
    elif full:
        d = roster - listed
    else:
        d = None
    if d is not None:
        allowed = sched.removable(min(max(d, 0), roster))
        if not allowed or g < min(allowed):
            raise ProtocolError(
                f"client {client}: refusing to reveal noise group {g}: with d = {d} dropouts (roster {roster}, "
                f"tolerance D = {sched.max_dropouts}) only groups "
                f"{'>= ' + str(min(allowed)) if allowed else '(none)'} may be removed"
            )
    return g
