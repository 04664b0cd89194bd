"""Figures quoted in the prose of the front pages come from outputs the test suite checks.

Only the ```python blocks (their asserts) and ```console transcripts of a page are tested
(tests/tools/doc_blocks.py); prose that quotes a number next to them drifts when an output moves. So every
decimal figure of two or more decimal places in the prose of README.md and docs/getting-started.md must be the
rounding of a number printed or asserted by a tested block of the same page; "prints N certificates" must
count the certificate lines of the page's check-in transcript; and a quoted "N/N checks passed" must be what
`secagg-dp verify` prints.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "tools" / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("doc_blocks", doc_blocks)
_spec.loader.exec_module(doc_blocks)

PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
_QUOTED = re.compile(r"(?<![\w.^⁻/])(\d+\.\d{2,})(?!\w|\.\d)")  # 0.720, 4.768, 0.00098 (not 0.1, not 2^62)
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "both": 2}


def _split(page: Path) -> tuple[str, str]:
    """(prose without code blocks and inline code, text of the page's tested blocks)."""
    text = page.read_text()
    blocks = doc_blocks.blocks(page)
    tested = "\n".join(b.body for b in blocks if b.lang in ("python", "console") and not b.skip)
    prose = text
    for b in blocks:
        prose = prose.replace(b.body, "")
    prose = re.sub(r"Python ≥ \d+\.\d+", "", prose)  # a version, not a figure
    return re.sub(r"`[^`]*`", "", prose), tested


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_quoted_figures_are_tested_outputs(page):
    prose, tested = _split(page)
    printed = [float(x) for x in _NUMBER.findall(tested)]
    missing = []
    for quoted in sorted(set(_QUOTED.findall(prose))):
        places = len(quoted.split(".")[1])
        if not any(abs(round(x, places) - float(quoted)) < 0.5 * 10**-places for x in printed):
            missing.append(quoted)
    assert not missing, f"{page.name} quotes figures no tested block prints or asserts: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_certificate_count_matches_the_transcript(page):
    prose, tested = _split(page)
    lines = [line for line in tested.splitlines() if re.match(r"\s+\S.*\((?:rdp|pld|window)\)\s+\d", line)]
    certificates = [line for line in lines if not line.strip().startswith("observer")]
    for m in re.finditer(r"\b(one|two|three|four|five|both)\s+certificates\b", prose):
        assert _WORDS[m.group(1)] == len(certificates), f"{page.name}: '{m.group(0)}', the transcript prints {lines}"


@pytest.mark.slow  # runs `secagg-dp verify` (about 4 s)
def test_quoted_verify_count_is_what_verify_prints():
    quoted = {m.group(0) for p in PAGES for m in re.finditer(r"\d+/\d+ checks passed", p.read_text())}
    assert quoted, "the front pages quote the verify summary"
    out = doc_blocks.run_command("secagg-dp verify")
    assert quoted == {out[-1].strip()}, out[-1]
