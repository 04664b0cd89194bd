"""SecAgg+ graphs: symmetric Harary neighbourhoods of degree k; parameter rule meets its own conditions."""

import math

import pytest
from scipy import stats

from protocols.graph import neighbourhoods, neighbours_of, secaggplus_parameters
from secagg_dp.errors import ParameterError

SEED = b"\x04" * 32


@pytest.mark.parametrize("n,k", [(10, 4), (11, 4), (12, 5), (30, 8), (7, 6), (5, 10)])
def test_symmetric_degree_and_per_client_view(n, k):
    ids = list(range(100, 100 + n))
    nb = neighbourhoods(ids, k, SEED)
    for u in ids:
        assert u not in nb[u] and all(u in nb[v] for v in nb[u])  # undirected
        expect = min(k, n - 1)
        assert len(nb[u]) == expect or (k % 2 and n % 2 and len(nb[u]) == k + 1)
        assert neighbours_of(ids, k, SEED, u) == nb[u]


def test_graph_depends_on_seed():
    ids = list(range(40))
    assert neighbourhoods(ids, 4, SEED) != neighbourhoods(ids, 4, b"\x05" * 32)


@pytest.mark.parametrize("n,delta,gamma", [(100, 0.1, 0.0), (1000, 0.1, 0.0), (1000, 0.05, 0.05)])
def test_parameters_satisfy_stated_conditions(n, delta, gamma):
    k, t = secaggplus_parameters(n, dropout_fraction=delta, corrupt_fraction=gamma)
    assert k % 2 == 0 and t > (k + 1) / 2 and t <= k + 1
    drop = stats.hypergeom(n - 1, math.floor(delta * (n - 1)), k)
    bad = stats.hypergeom(n - 1, math.ceil(gamma * (n - 1)), k)
    assert n * drop.sf(k + 1 - t) <= 2**-20
    assert n * bad.sf(t - 1) <= 2**-40
    assert n**2 * (delta + gamma) ** k <= 2**-40
    if k > 2:  # minimality: k - 2 fails some condition for every t
        km = k - 2
        d2 = stats.hypergeom(n - 1, math.floor(delta * (n - 1)), km)
        b2 = stats.hypergeom(n - 1, math.ceil(gamma * (n - 1)), km)
        assert all(
            n * d2.sf(km + 1 - tt) > 2**-20 or n * b2.sf(tt - 1) > 2**-40 or n**2 * (delta + gamma) ** km > 2**-40
            for tt in range(km // 2 + 1, km + 2)
        )


def test_parameter_rule_refuses_hopeless_regimes():
    with pytest.raises(ParameterError):
        secaggplus_parameters(100, dropout_fraction=0.3, corrupt_fraction=0.3)
