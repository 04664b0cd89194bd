"""docs/noise-enforcement.md, "The dropout study": its table and the claims its prose makes about it.

The table quotes, for the bundled ``dropouts`` study (n = 1000, p = 0.1, z = 4, 20 bits, Skellam, T = 20,
delta = 1e-5, tolerance 0.1), the certified epsilon of each observer without and with add-then-remove
enforcement. The analyst columns must be the figures docs/simulator.md's tested block asserts (that block
recomputes them from the simulator's accountant, tests/docs/test_docs.py); the server columns are recomputed
here from the check-in accountant's server view with the study's parameters (fast: the window certificate at
orders 2..6, which the simulator's ``auto`` choice can only lower; a slow test checks the simulator's own
figures, both observers). The prose's shape claims (which sequence decreases, up to which p', which is not
monotone) are checked against the recomputed sequences, so a sentence that calls the server's epsilon flat or
decreasing, or the analyst's flat at every p', fails here.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "noise-enforcement.md"
SIMULATOR = ROOT / "docs" / "simulator.md"
COLUMNS = ("analyst ε without", "analyst ε with", "server ε without", "server ε with")
ENFORCEMENT = {"without": "none", "with": "add-then-remove"}


def _section() -> str:
    text = PAGE.read_text()
    start = text.index("### The dropout study")
    end = text.index("\n## ", start)
    return text[start:end]


def _table() -> dict[float, dict[str, str]]:
    """p' -> {column: figure as printed} of the section's table."""
    lines = [line for line in _section().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[0] == "p′" and tuple(header[1:5]) == COLUMNS, header
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[float(cells[0])] = dict(zip(COLUMNS, cells[1:5], strict=True))
    return rows


def _paragraph(label: str) -> str:
    """The section's paragraph that opens with **label.**, joined into one line."""
    for para in _section().split("\n\n"):
        if para.startswith(f"**{label}.**"):
            return " ".join(para.split())
    raise AssertionError(f"the dropout study has no '**{label}.**' paragraph")


def _matches(printed: str, value: float) -> bool:
    places = len(printed.split(".")[1]) if "." in printed else 0
    return abs(value - float(printed)) < 0.5 * 10**-places


@functools.cache
def _server_window() -> dict[tuple[float, str], float]:
    """(p', enforcement) -> the server's window certificate for the study's 20 rounds, from the check-in
    accountant's server view (participation revealed, docs/accounting/observers.md) with the base mechanism and
    sensitivities the simulator derives for the variant."""
    from secagg_dp.accounting.checkin.observers import server_certificate
    from simulations.config import load_config
    from simulations.privacy import checkin_provider_for, effective_gamma, enforced_provider_for
    from simulations.runner import plan

    orders = np.arange(2, 7)
    out = {}
    for p_drop in _table():
        for enforcement in ENFORCEMENT.values():
            cfg = load_config("dropouts", [f"population.dropout={p_drop}", f"privacy.noise_enforcement={enforcement}"])
            pop, priv = cfg.population, cfg.privacy
            assert (pop.clients, pop.checkin, cfg.rounds, priv.delta) == (1000, 0.1, 20, 1e-5)
            assert (cfg.secagg.bits, priv.mechanism, priv.noise_multiplier, priv.dropout_tolerance) == (
                20,
                "skellam",
                4.0,
                0.1,
            )
            p = plan(cfg, cfg.seed)
            provider = enforced_provider_for(cfg, p) if enforcement != "none" else checkin_provider_for(cfg, p)
            gamma = effective_gamma(pop.checkin, pop.dropout)
            cert = server_certificate(
                provider.mechanism, pop.clients, gamma, cfg.rounds, priv.delta, orders, method="window"
            )
            assert cert.observer == "server"
            assert cert.order < orders[-1], "the optimum is at the largest order offered: widen the grid"
            out[(p_drop, enforcement)] = cert.epsilon
    return out


def _sequence(column: str) -> list[float]:
    return [float(row[column]) for _, row in sorted(_table().items())]


def test_table_covers_the_study_grid():
    from simulations.config import load_config

    grid = load_config("dropouts").study.grid
    assert sorted(_table()) == sorted(grid["population.dropout"])
    assert sorted(grid["privacy.noise_enforcement"]) == sorted(ENFORCEMENT.values())


def test_analyst_columns_are_the_figures_the_simulator_page_asserts():
    block = re.search(r'assert certificates\("dropouts"\) == \{(.*?)\n\}', SIMULATOR.read_text(), re.S)
    assert block, "docs/simulator.md no longer asserts the dropout study's certificates"
    asserted = {
        (float(m.group(1)), m.group(2)): m.group(3)
        for m in re.finditer(r'"dropout=([\d.]+), noise_enforcement=([\w-]+)": ([\d.]+)', block.group(1))
    }
    for p_drop, row in _table().items():
        for word, enforcement in ENFORCEMENT.items():
            figure = asserted[(p_drop, enforcement)]
            assert row[f"analyst ε {word}"] == figure, (p_drop, word, figure)


def test_server_columns_match_the_accountant():
    computed = _server_window()
    wrong = {
        (p_drop, word): (row[f"server ε {word}"], round(computed[(p_drop, enforcement)], 4))
        for p_drop, row in _table().items()
        for word, enforcement in ENFORCEMENT.items()
        if not _matches(row[f"server ε {word}"], computed[(p_drop, enforcement)])
    }
    assert not wrong, f"server figures of the table against the accountant: {wrong}"


def test_server_claims_follow_the_measured_sequence():
    xs = sorted(_table())
    computed = _server_window()
    with_ = [computed[(x, "add-then-remove")] for x in xs]
    without = [computed[(x, "none")] for x in xs]
    steps = np.diff(with_)
    # measured: 5.08, 4.87, 4.93, 5.80, 10.53 -- down, then up
    assert (steps < 0).any() and (steps > 0).any(), f"the enforced server sequence is monotone now: {with_}"
    server = _paragraph("Server")
    assert "is not monotone in p′ with enforcement" in server
    quoted = re.search(r"not monotone in p′ with enforcement: ([\d., ]+)\.", server)
    assert quoted and quoted.group(1).split(", ") == [f"{v:.2f}" for v in with_], server
    first_above = next(x for x, v in zip(xs, with_, strict=True) if v > with_[0])
    assert f"from p′ = {first_above:g} on the server's ε exceeds its no-dropout value" in server
    assert all(b > a for a, b in zip(without, without[1:], strict=False)), without
    assert "grows with p′ from the start" in server
    assert all(w < wo for w, wo in zip(with_, without, strict=True))
    assert "enforcement keeps it below that at every p′" in server


def test_flatness_claims_are_the_analyst_s_and_bounded():
    """The decrease/flatness claim is made for the analyst only, up to the last p' where it holds."""
    xs = sorted(_table())
    analyst = _sequence("analyst ε with")  # the simulator's figures (test above)
    limit = xs[0]
    for x, prev, cur in zip(xs[1:], analyst, analyst[1:], strict=True):
        if cur > prev or cur > analyst[0]:
            break
        limit = x
    assert limit == 0.3 and limit < xs[-1], (limit, analyst)  # measured: 2.64, 2.26, 1.99, 1.51, then 10.14
    claim = re.compile(r"never exceeds|at or below|decreases?\b|\bflat", re.I)
    for para in _section().split("\n\n"):
        text = " ".join(para.split())
        if claim.search(text) and not text.startswith("**Server.**"):
            assert text.startswith("**Analyst.**"), f"a flatness claim outside the analyst's paragraph: {text}"
    analyst_para = _paragraph("Analyst")
    assert analyst_para.count(f"up to p′ = {limit:g}") >= 2, analyst_para  # both the bound and the decrease
    assert f"{analyst[-1]:.2f}" in analyst_para  # and the exception is stated with its figure
    server = _paragraph("Server")
    assert not re.search(r"never exceeds|at or below|decreases", server), server


@pytest.mark.slow  # the simulator's own accountant for the 10 variants, both observers (about 30 s, 2 cores)
def test_table_is_what_the_simulator_certifies():
    from simulations.config import expand_study, load_config
    from simulations.privacy import make_accountant
    from simulations.runner import plan

    cfg = load_config("dropouts")
    table = _table()
    wrong = []
    for _, values, variant in expand_study(cfg):
        acct = make_accountant(variant, plan(variant, cfg.seed), None)
        try:
            row = table[values["population.dropout"]]
            word = {v: k for k, v in ENFORCEMENT.items()}[values["privacy.noise_enforcement"]]
            for observer, eps in (("analyst", acct.planned_epsilon), ("server", acct.server_planned_epsilon)):
                if not _matches(row[f"{observer} ε {word}"], eps):
                    wrong.append((values, observer, row[f"{observer} ε {word}"], round(eps, 4)))
        finally:
            acct.close()
    assert not wrong, wrong
