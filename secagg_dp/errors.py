"""The single exception hierarchy of secagg-dp.

Every error raised on purpose by the library, the protocols or the simulator derives from
:class:`SecAggDPError`, so callers can catch everything of ours in one clause. Value errors also derive
from :class:`ValueError` so generic code that expects the built-in still works.

Messages name the argument, what was expected and what was received, e.g.
``Argument 'bits' must be an integer in [1, 62], not 70.``
"""

from __future__ import annotations

__all__ = [
    "SecAggDPError",
    "ParameterError",
    "ConfigError",
    "TaskError",
    "ProtocolError",
    "AuthenticationError",
    "AbortError",
    "PrivacyBudgetExceeded",
    "LedgerError",
    "RoundingError",
    "UnsupportedEventError",
]


class SecAggDPError(Exception):
    """Root of every error raised on purpose by secagg-dp."""


class ParameterError(SecAggDPError, ValueError):
    """A parameter has an invalid value (out of range, NaN/inf, wrong shape, infeasible combination)."""


class ConfigError(ParameterError):
    """A simulation configuration is invalid (unknown key, impossible combination)."""


class TaskError(ParameterError):
    """A simulation task (``simulations.Task``) broke its contract or raised: the message names the task, the
    method and what was expected (or what it raised, and where)."""


class RoundingError(ParameterError):
    """Conditional randomized rounding did not meet its norm bound within the retry cap."""


class ProtocolError(SecAggDPError):
    """A protocol message or transition is invalid, or a round must abort."""


class AuthenticationError(ProtocolError):
    """A ciphertext or message failed authentication. Deliberately opaque: no detail of why."""


class AbortError(ProtocolError):
    """A secure-aggregation round aborted cleanly (e.g. fewer than `threshold` clients remain)."""


class PrivacyBudgetExceeded(SecAggDPError):
    """An accounting event was refused because it would exceed the privacy budget."""


class LedgerError(SecAggDPError):
    """A privacy-ledger file is not a ledger, is damaged, or cannot be read or written safely."""


class UnsupportedEventError(ParameterError):
    """An accountant cannot process an event; the message names the offending sub-event and why.

    Raised by ``compose`` before any state changes (:mod:`secagg_dp.accounting.core.accountant`)."""
