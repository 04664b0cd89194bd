"""A small numpy MLP trained by federated averaging on scikit-learn's bundled digits, split non-IID.

A :class:`simulations.Task` at the client level, named in configs by import path
(``task.name = "simulations.tasks.mlp:MLPTask"``, keywords in ``[task.options]``): the workload of the
``mlp_digits`` study (``benchmarks/bench_mlp_digits.py``).

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images, 10 classes; in the scikit-learn wheel, nothing is
downloaded), pixels scaled to [0, 1]. A seeded shuffle holds out 20 % as the test set. The rest is split
across ``clients`` clients with Dirichlet label skew (Hsu, Qi & Brown 2019): for every class, proportions
p ~ Dir(alpha 1_n) over the clients and the class's examples cut accordingly, so small ``alpha`` gives each
client few classes (alpha = 0.5 here by default; sizes differ between clients, some may hold nothing).

Model: 64 -> ``hidden`` (tanh) -> 10 (softmax), cross-entropy; parameters flattened as
[W1 (64 x h), b1 (h), W2 (h x 10), b2 (10)], Glorot-uniform initial weights, zero biases.

Client (DP-FedAvg, McMahan et al. 2018): from the global model, ``local_steps`` SGD steps of learning rate
``lr`` on minibatches of ``batch`` examples drawn without replacement from its own data (a fresh draw per
step, the whole shard if smaller); its row is the model change (unclipped: the simulator clips it to C and
adds the noise). Server: theta <- theta + ``server_lr`` * decode(sum) / K.

Seeds (numpy ``SeedSequence(root_seed, spawn_key=...)``): test split and Dirichlet split (3, 0), initial
weights (3, 1), client i's minibatches in round r (3, 2, r, i).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from secagg_dp.errors import ParameterError

__all__ = ["MLPTask", "digits_dirichlet_split", "loss_and_grad", "unflatten"]

N_IN, N_OUT = 64, 10


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # bundled with scikit-learn; no network access

    data = load_digits()
    return (data.data / 16.0).astype(np.float64), data.target.astype(np.int64)


@functools.lru_cache(maxsize=8)
def digits_dirichlet_split(
    root_seed: int, clients: int, alpha: float
) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(per-client index arrays into x_train, x_train, y_train, x_test, y_test) for a Dirichlet label skew."""
    x, y = _digits()
    rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(3, 0)))
    perm = rng.permutation(len(y))
    n_test = len(y) // 5
    test, train = perm[:n_test], perm[n_test:]
    x_train, y_train = x[train], y[train]
    parts: list[list[np.ndarray]] = [[] for _ in range(clients)]
    for c in range(N_OUT):
        idx = np.flatnonzero(y_train == c)
        idx = idx[rng.permutation(len(idx))]
        share = rng.dirichlet(np.full(clients, alpha))
        cuts = np.floor(np.cumsum(share)[:-1] * len(idx)).astype(np.int64)
        for i, piece in enumerate(np.split(idx, cuts)):
            parts[i].append(piece)
    shards = tuple(np.sort(np.concatenate(p)) for p in parts)
    return shards, x_train, y_train, x[test], y[test]


def unflatten(theta: np.ndarray, hidden: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Views (W1, b1, W2, b2) of the flat parameter vector."""
    a = N_IN * hidden
    b = a + hidden
    c = b + hidden * N_OUT
    return (
        theta[:a].reshape(N_IN, hidden),
        theta[a:b],
        theta[b:c].reshape(hidden, N_OUT),
        theta[c : c + N_OUT],
    )


def loss_and_grad(theta: np.ndarray, x: np.ndarray, y: np.ndarray, hidden: int) -> tuple[float, np.ndarray]:
    """Mean cross-entropy of the MLP on (x, y) and its gradient (backpropagation), flat like ``theta``."""
    w1, b1, w2, b2 = unflatten(theta, hidden)
    h = np.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    n = len(y)
    loss = float(-logp[np.arange(n), y].mean())
    d_logits = np.exp(logp)
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    g_w2 = h.T @ d_logits
    g_b2 = d_logits.sum(axis=0)
    d_h = (d_logits @ w2.T) * (1.0 - h * h)
    g_w1 = x.T @ d_h
    g_b1 = d_h.sum(axis=0)
    return loss, np.concatenate([g_w1.ravel(), g_b1, g_w2.ravel(), g_b2])


class MLPTask:
    """Federated averaging of a 64-``hidden``-10 tanh MLP on digits, ``clients`` non-IID shards (Dirichlet
    ``alpha``). ``clients`` must be at least the config's ``population.clients``."""

    name = "mlp-digits"

    def __init__(
        self,
        clients: int = 100,
        hidden: int = 32,
        alpha: float = 0.5,
        local_steps: int = 5,
        batch: int = 16,
        lr: float = 0.5,
        server_lr: float = 1.0,
    ) -> None:
        for key, val in (("clients", clients), ("hidden", hidden), ("local_steps", local_steps), ("batch", batch)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ParameterError(f"Argument '{key}' must be a positive integer, not {val!r}.")
        for key, fval in (("alpha", alpha), ("lr", lr), ("server_lr", server_lr)):
            if not isinstance(fval, int | float) or not np.isfinite(fval) or fval <= 0:
                raise ParameterError(f"Argument '{key}' must be a positive real number, not {fval!r}.")
        self.clients, self.hidden, self.alpha = clients, hidden, float(alpha)
        self.local_steps, self.batch, self.lr, self.server_lr = local_steps, batch, float(lr), float(server_lr)
        self.vector_dim = N_IN * hidden + hidden + hidden * N_OUT + N_OUT

    def _split(self, root_seed: int) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return digits_dirichlet_split(root_seed, self.clients, self.alpha)

    def init_model(self, root_seed: int) -> np.ndarray:
        rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(3, 1)))
        theta = np.zeros(self.vector_dim)
        w1, _, w2, _ = unflatten(theta, self.hidden)
        w1[:] = rng.uniform(-1, 1, w1.shape) * np.sqrt(6.0 / (N_IN + self.hidden))  # Glorot & Bengio 2010
        w2[:] = rng.uniform(-1, 1, w2.shape) * np.sqrt(6.0 / (self.hidden + N_OUT))
        return theta

    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        """Each client's model change after its local SGD steps (unclipped)."""
        shards, x_train, y_train, _, _ = self._split(root_seed)
        ids = np.asarray(client_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.clients):
            raise ParameterError(
                f"Task 'mlp-digits': client id {int(ids.max())} is outside its {self.clients} clients: set "
                "task.options.clients to at least population.clients."
            )
        out = np.zeros((len(ids), self.vector_dim))
        for row, cid in zip(out, ids.tolist(), strict=True):
            mine = shards[cid]
            if len(mine) == 0:
                continue  # a client without data sends a zero update (it still adds its noise share)
            rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(3, 2, round, cid)))
            theta = np.array(model, dtype=np.float64, copy=True)
            for _ in range(self.local_steps):
                pick = mine if len(mine) <= self.batch else rng.choice(mine, size=self.batch, replace=False)
                _, g = loss_and_grad(theta, x_train[pick], y_train[pick], self.hidden)
                theta -= self.lr * g
            row[:] = theta - model
        return out

    def server_update(
        self, model: Any, decoded_sum: np.ndarray, participants: int, root_seed: int
    ) -> tuple[np.ndarray, dict[str, float]]:
        """theta + server_lr * (average update); test accuracy and loss."""
        if participants > 0:
            model = model + self.server_lr * decoded_sum / participants
        return model, self.evaluate(model, root_seed)

    def evaluate(self, model: np.ndarray, root_seed: int) -> dict[str, float]:
        """Test accuracy and mean cross-entropy of ``model`` on the held-out fifth."""
        _, _, _, x_test, y_test = self._split(root_seed)
        loss, _ = loss_and_grad(model, x_test, y_test, self.hidden)
        w1, b1, w2, b2 = unflatten(model, self.hidden)
        pred = np.argmax(np.tanh(x_test @ w1 + b1) @ w2 + b2, axis=1)
        return {"accuracy": float(np.mean(pred == y_test)), "loss": loss}
