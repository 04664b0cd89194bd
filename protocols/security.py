"""Security modes and the threshold rules each mode enforces.

``"active"`` (default): the server may deviate arbitrarily and collude with a few clients (Bonawitz et al.
2017, Sec. 6: signed keys, a consistency round). ``"semi-honest"``: the server follows the protocol; only
for trusted-server deployments and comparisons (the weaker mode says so in its name).

Why the active thresholds. A server that tells some holders of an honest client v's shares "v dropped"
and the others "v survived" gets t shares of both of v's secrets if it controls c >= 2t - h of v's h
share holders: the honest holders are split into two groups that each reach t with the colluders'
shares. Hence t > (h + c) / 2. Full graph: h = n and t > 2n/3 tolerates any c < n/3 (Bonawitz et al.
2017, Thm. 6.5's regime). SecAgg+: h = k + 1 and the bound on c comes from the corrupt fraction
(:func:`protocols.graph.secaggplus_parameters`); every client also insists on t > h / 2 itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocols.wire import MAX_CLIENT_ID
from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = ["SECURITY_MODES", "DEFAULT_MAX_CLIENTS", "check_security", "min_threshold", "ClientPolicy"]

SECURITY_MODES = ("active", "semi-honest")
DEFAULT_MAX_CLIENTS = 1 << 20  #: a client's default bound on the population of a round (see ClientPolicy)


def check_security(value: object, name: str = "security") -> str:
    """``value`` if it is one of :data:`SECURITY_MODES`, else a ParameterError naming ``name``."""
    if not isinstance(value, str):
        raise TypeError(f"Argument '{name}' must be a str, not {type(value).__name__}.")
    if value not in SECURITY_MODES:
        raise ParameterError(f"Argument '{name}' must be one of {SECURITY_MODES}, not {value!r}.")
    return value


def min_threshold(holders: int, *, neighbours: int | None, security: str) -> int:
    """Smallest Shamir threshold a client accepts when each secret has ``holders`` share holders.

    active, full graph (``neighbours=None``): floor(2h/3) + 1 (t > 2n/3, Bonawitz et al. 2017);
    active, SecAgg+: floor(h/2) + 1 (t > (k + 1)/2; the corrupt-fraction margin comes from the client's
    own configured minimum); semi-honest: 2.
    """
    h = check_int("holders", holders, lo=1)
    if check_security(security) == "semi-honest":
        return 2
    return max(2, (2 * h) // 3 + 1 if neighbours is None else h // 2 + 1)


@dataclass(frozen=True)
class ClientPolicy:
    """What a client insists on, from its own configuration, never from the server.

    ``security``: the mode it runs (a round announced in another mode is refused); ``min_threshold``: the
    smallest Shamir threshold it accepts; ``neighbours``: the SecAgg+ degree it expects (``None``: full
    graph); a round with another degree is refused, since a larger k at the same t needs fewer colluders.
    On top of ``min_threshold`` an active client applies :func:`min_threshold` to the roster it receives.

    ``min_roster``: the smallest roster an active client accepts, from its own idea of the population (e.g.
    the number of clients a deployment expects to check in, less the dropouts it plans for: the N of
    :func:`protocols.graph.secaggplus_parameters`). An active SecAgg+ policy (``neighbours`` set) must state
    it: without it (``None``) construction raises ParameterError. The guarantee of Bell et al. 2020 (Sec.
    3-4) as :func:`~protocols.graph.secaggplus_parameters` evaluates it holds for rosters of at least N
    clients (the colluders among a victim's k neighbours are hypergeometric over the N - 1 others); no floor
    a client can compute without knowing N keeps it (at n = 1,000 and (k, t) = (74, 50), a hand-picked
    roster of k + 2 = 76 puts t = 50 colluders among a victim's 74 neighbours). Full graph (``neighbours=None``)
    and semi-honest mode need none: ``None`` accepts any roster of at least ``min_threshold`` clients.
    On the full graph that keeps the guarantee: every client of an accepted roster of N' holds a share of
    every secret, and the client insists on t > 2N'/3 for the roster it receives (:func:`min_threshold`) and
    on N' >= t, so N' < 3t/2 and splitting the survivors takes 2t - N' > t/2 colluders (Bonawitz et al.
    2017, Sec. 6), more than n/3 for any population n with t > 2n/3, whatever roster the server picks.
    With a degree configured, an active client also never takes a roster of ``neighbours + 1`` or fewer
    clients as a full graph: it refuses it (a server that admits only k + 1 check-ins would otherwise turn a
    SecAgg+ threshold meant for k + 1 holders drawn from a large population into a full-graph threshold
    over clients it picked itself).

    ``max_clients``: the largest population it expects in a round; a roster (and so every message whose size
    grows with the roster) beyond it is refused by its size, before parsing.
    """

    security: str = "active"
    min_threshold: int = 2
    neighbours: int | None = None
    min_roster: int | None = None
    max_clients: int = DEFAULT_MAX_CLIENTS

    def __post_init__(self) -> None:
        check_security(self.security)
        check_int("min_threshold", self.min_threshold, lo=2, strict=True)
        if self.neighbours is not None:
            check_int("neighbours", self.neighbours, lo=2, strict=True)
        if self.min_roster is not None:
            check_int("min_roster", self.min_roster, lo=2, strict=True)
        elif self.security == "active" and self.neighbours is not None:
            raise ParameterError(
                f"Argument 'min_roster' is required for an active SecAgg+ client (neighbours={self.neighbours}), "
                "not None. To fix, pass the smallest roster this client expects: the number of clients the "
                "deployment expects to check in, less the dropouts it plans for (the min_roster N given to "
                "secaggplus_parameters). Without it a server could admit a few hand-picked check-ins "
                f"(a roster of neighbours + 2 = {self.neighbours + 2}) and put t colluders among a victim's share "
                "holders; the threshold protects only rosters of the population the parameters were chosen for "
                "(docs/secure-aggregation.md, Thresholds)."
            )
        check_int("max_clients", self.max_clients, lo=2, hi=MAX_CLIENT_ID + 1, strict=True)

    @property
    def roster_floor(self) -> int:
        """The smallest roster this policy accepts in active mode (see ``min_roster``)."""
        floor = self.min_threshold if self.neighbours is None else self.neighbours + 2
        return max(floor, self.min_roster or 0)
