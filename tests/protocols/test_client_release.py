"""What a simulated client lets go once it is spent (its input and mask seeds after the masked input, its
randomness source after sharing keys, its boxes and channel keys after the unmask response), that a round
still sums exactly with dropouts at every stage, and that importing ``protocols`` does not load scipy.stats
(about 65 MB of resident memory in every process that runs a round)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from protocols import InProcessClientPool, run_pooled_round
from protocols.stages import ClientStage
from secagg_dp.errors import ProtocolError

BITS, DIM = 16, 5
IDS = list(range(1, 31))


@pytest.mark.parametrize(("neighbours", "security"), [(8, "active"), (None, "active"), (8, "semi-honest")])
@pytest.mark.parametrize("stage", ["share_keys", "masked_input", "consistency", "unmasking"])
def test_released_state_leaves_the_sum_exact(neighbours: int | None, security: str, stage: str) -> None:
    rng = np.random.default_rng(3)
    inputs = {c: rng.integers(0, 1 << BITS, DIM, dtype=np.uint64) for c in IDS}
    gone = {3, 17} if stage == "share_keys" else {5, 22}  # silent from ``stage`` on
    if security == "semi-honest" and stage == "consistency":
        stage = "unmasking"  # no consistency round in semi-honest mode
    pool = InProcessClientPool(inputs)
    t = 5 if neighbours else (21 if security == "active" else 4)
    res = run_pooled_round(
        pool, IDS, DIM, bits=BITS, threshold=t, neighbours=neighbours, security=security,
        dropouts={stage: gone}, seed=2, round_id=bytes(16),
    )  # fmt: skip
    late = stage in ("consistency", "unmasking")  # silent after the masked input: its y arrived and counts
    alive = [c for c in IDS if c not in gone or late]
    want = [sum(int(inputs[c][i]) for c in alive) % (1 << BITS) for i in range(DIM)]  # oracle: Python ints
    assert [int(v) for v in res.aggregate] == want
    for cid, client in pool.clients.items():
        if client.stage is ClientStage.DONE:  # answered the unmask request: boxes and keys are gone
            assert not hasattr(client, "_box_blob") and not hasattr(client, "_peers"), cid
        if client.stage in (ClientStage.MASKED_INPUT_SENT, ClientStage.SURVIVORS_SIGNED, ClientStage.DONE):
            assert client._x == b"" and client._self_seed == b"", cid  # input and self-mask seed spent
        if client.stage is not ClientStage.KEYS_ADVERTISED:  # after sharing keys no randomness is drawn
            with pytest.raises(ProtocolError, match="no randomness"):
                client._src.bytes(1)


def test_importing_protocols_does_not_load_scipy_stats() -> None:
    code = "import sys, protocols; sys.exit(int(any(m.startswith('scipy.stats') for m in sys.modules)))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
