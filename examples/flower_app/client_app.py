"""The ClientApp: plain local training, wrapped by our Mod (clip, encode onto Z_q, noise, mask)."""

from __future__ import annotations

from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from task import local_train

from simulations.flower import secagg_dp_mod

app = ClientApp(mods=[secagg_dp_mod])


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Train from the received model on this node's partition; the Mod turns the result into a masked,
    noised Z_q vector, and the plain model never leaves the node."""
    (w,) = msg.content["arrays"].to_numpy_ndarrays()
    p = int(context.node_config["partition-id"])
    return Message(RecordDict({"arrays": ArrayRecord([local_train(w, p)])}), reply_to=msg)
