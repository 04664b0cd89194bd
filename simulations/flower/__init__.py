"""A Flower path: our clipping, Z_q encoding, discrete noise, masking and accounting inside a Flower app.

Optional extra ``secagg-dp[flower]`` (``flwr`` is imported only when these names are used; the rest of the
package never needs it). Client: :func:`secagg_dp_mod`, a Flower Mod for a ``ClientApp``'s ``train``. Server:
:class:`SecAggDPWorkflow`, which a ``ServerApp`` calls once per round. Parameters: :class:`FlowerDPConfig`.
Reference: :func:`ideal_round`, our ideal mode for the same seed and inputs. Guide: docs/flower.md.
"""

from __future__ import annotations

from typing import Any

from simulations.flower.core import FlowerDPConfig, client_generator, encode_update, ideal_round, round_event

# the Flower-facing names, each with its module, imported on first use by __getattr__ below
_LAZY = {
    "secagg_dp_mod": "simulations.flower.client",
    "make_secagg_dp_mod": "simulations.flower.client",
    "SecAggDPWorkflow": "simulations.flower.server",
    "FlowerClientPool": "simulations.flower.server",
    "FlowerRound": "simulations.flower.server",
}

__all__ = ["FlowerDPConfig", "client_generator", "encode_update", "ideal_round", "round_event", *_LAZY]


def __getattr__(name: str) -> Any:
    """The Flower-facing names, imported on first use (their modules import flwr only inside functions)."""
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
