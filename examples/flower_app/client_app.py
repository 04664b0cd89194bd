"""The ClientApp: plain local training, wrapped by our Mod (clip, encode onto Z_q, noise, mask).

The Mod is pinned to the run's parameters (:func:`simulations.flower.make_secagg_dp_mod`): a server asking for
other privacy parameters gets an error instead of an update. ``FLOWER_APP_FAIL`` (partition ids, set by
``run.py --fail``) makes those nodes fail in ``train``: a dropout, for the tests.
"""

from __future__ import annotations

import os

from app_config import config_from_env
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from task import local_train

from simulations.flower import make_secagg_dp_mod

app = ClientApp(mods=[make_secagg_dp_mod(pinned=config_from_env()[0])])


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train from the received model on this node's partition; the Mod turns the result into a masked,
    noised Z_q vector, and the plain model never leaves the node."""
    (w,) = msg.content["arrays"].to_numpy_ndarrays()
    p = int(context.node_config["partition-id"])
    if str(p) in os.environ.get("FLOWER_APP_FAIL", "").split(","):
        raise RuntimeError(f"partition {p}: simulated dropout")
    return Message(RecordDict({"arrays": ArrayRecord([local_train(w, p)])}), reply_to=msg)
