"""Federated multinomial logistic regression on scikit-learn's bundled digits data, with DP-SGD locally.

Data: ``sklearn.datasets.load_digits`` (1797 8x8 images, 10 classes) ships inside the scikit-learn wheel
(``sklearn/datasets/data/digits.csv.gz``): nothing is downloaded. Features are scaled to [0, 1] and a bias
feature is appended. A seeded shuffle holds out 20 % as the test set and splits the rest into equal
shards, one per client (the remainder is unused so every client has the same m samples, which makes the
expected batch q*m public and the same for all).

Client, per round, by unit of privacy (``privacy.unit``):

* ``"client"`` (default; DP-FedAvg with distributed noise): S local SGD steps on Poisson(q) minibatches
  without clipping or noise, then the whole model update w_S - w_0 is clipped to C, encoded once and one
  noise draw added. The server applies the survivors' average update, w <- w + decode(sum) / K.
* ``"sample"`` (DP-SGD): S local steps; in each, Poisson-sample the shard with rate q, clip every
  per-sample gradient to C, encode each onto Z_q (so one sample moves the step's integer vector by at most
  the codec's Delta_2), add one discrete noise draw, decode that step locally to take the local step
  w <- w - lr * g / (q m), and add the step's residues to the round vector. The server applies the average
  of the local deltas, w <- w - lr * decode(sum) / (q m K).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from secagg_dp.errors import ConfigError

__all__ = ["LogRegTask", "load_digits_partition", "N_FEATURES", "N_CLASSES", "per_sample_gradients", "predict"]

N_FEATURES = 65  # 64 pixels + bias
N_CLASSES = 10


@functools.lru_cache(maxsize=4)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits  # bundled with scikit-learn; no network access

    data = load_digits()
    x = np.hstack([data.data / 16.0, np.ones((data.data.shape[0], 1))])
    return x, data.target.astype(np.int64)


@functools.lru_cache(maxsize=8)
def load_digits_partition(root_seed: int, n_clients: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train[n, m, 65], y_train[n, m], x_test, y_test) for ``n_clients`` equal shards."""
    x, y = _digits()
    perm = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(0, 2))).permutation(len(y))
    n_test = len(y) // 5
    test, train = perm[:n_test], perm[n_test:]
    m = len(train) // n_clients
    if m < 1:
        raise ConfigError(
            f"Config key 'population.clients' must be at most {len(train)} for task 'logreg' "
            f"(the digits training set has {len(train)} samples), not {n_clients}."
        )
    train = train[: m * n_clients]
    return x[train].reshape(n_clients, m, N_FEATURES), y[train].reshape(n_clients, m), x[test], y[test]


def predict(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    classes: np.ndarray = np.argmax(x @ w.reshape(N_FEATURES, N_CLASSES), axis=1)
    return classes


def per_sample_gradients(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Gradients of the cross-entropy loss, one row per sample: vec(x^T (softmax(xW) - onehot(y)))."""
    logits = x @ w.reshape(N_FEATURES, N_CLASSES)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    grads: np.ndarray = (x[:, :, None] * p[:, None, :]).reshape(len(y), -1)
    return grads


def _loss(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    logits = x @ w.reshape(N_FEATURES, N_CLASSES)
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


@dataclass(frozen=True)
class LogRegTask:
    n_clients: int
    local_steps: int
    sample_rate: float
    learning_rate: float
    unit: str = "client"
    name: str = "logreg"
    metric: str = "accuracy"

    @property
    def vector_dim(self) -> int:
        return N_FEATURES * N_CLASSES

    def shard_size(self, root_seed: int) -> int:
        return int(load_digits_partition(root_seed, self.n_clients)[0].shape[1])

    def init_model(self, root_seed: int) -> np.ndarray:
        load_digits_partition(root_seed, self.n_clients)  # fail early (ConfigError) if shards would be empty
        return np.zeros(N_FEATURES * N_CLASSES)

    def client_vectors(self, model: np.ndarray, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        """Client level: each client's update w_S - w_0 after S plain local SGD steps on Poisson(q) minibatches
        (unclipped: the simulator clips it). Minibatches come from the client's own generator, keyed by
        ``SeedSequence(root_seed, spawn_key=(2, round, client id))``, so any block cut gives the same rows."""
        xs, ys, _, _ = load_digits_partition(root_seed, self.n_clients)
        m = xs.shape[1]
        out = np.empty((len(client_ids), self.vector_dim))
        for row, cid in zip(out, np.asarray(client_ids, dtype=np.int64).tolist(), strict=True):
            rng = np.random.default_rng(np.random.SeedSequence(root_seed, spawn_key=(2, round, cid)))
            x, y = xs[cid], ys[cid]
            w = np.array(model, dtype=np.float64, copy=True)
            for _ in range(self.local_steps):
                chosen = np.asarray(rng.random(m)) < self.sample_rate
                if chosen.any():
                    grads = per_sample_gradients(w, x[chosen], y[chosen])
                    w -= self.learning_rate * grads.sum(axis=0) / (self.sample_rate * m)
            row[:] = w - model
        return out

    def sample_vectors(
        self, model: np.ndarray, client_id: int, examples: np.ndarray, round: int, root_seed: int
    ) -> np.ndarray:
        """Sample level: the cross-entropy gradients of the client's chosen examples (one row each)."""
        xs, ys, _, _ = load_digits_partition(root_seed, self.n_clients)
        return per_sample_gradients(model, xs[client_id][examples], ys[client_id][examples])

    def local_update(self, model: np.ndarray, step_sum: np.ndarray, expected_batch: float) -> np.ndarray:
        """One DP-SGD step from the decoded noisy sum of clipped gradients: w - lr * sum / (q m)."""
        return model - self.learning_rate * step_sum / expected_batch

    def server_update(
        self, model: np.ndarray, decoded_sum: np.ndarray, participants: int, root_seed: int
    ) -> tuple[np.ndarray, dict[str, float]]:
        """Apply the participants' average local delta and report test accuracy and loss."""
        _, _, x_test, y_test = load_digits_partition(root_seed, self.n_clients)
        if participants > 0 and self.unit == "client":
            model = model + decoded_sum / participants
        elif participants > 0:
            batch = self.sample_rate * self.shard_size(root_seed)
            model = model - self.learning_rate * decoded_sum / (batch * participants)
        acc = float(np.mean(predict(model, x_test) == y_test))
        return model, {"accuracy": acc, "loss": _loss(model, x_test, y_test)}
