"""The user guide: it builds strictly, its code runs, its transcripts match the CLI, it cites papers.

Every ```python block of README.md and docs/ runs (page by page, in one namespace and one temporary
working folder per page) and every ```console transcript is re-run and compared with its recorded output
(`tests/tools/doc_blocks.py`; `python tests/tools/doc_blocks.py --write` regenerates transcripts).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("doc_blocks", ROOT / "tests" / "tools" / "doc_blocks.py")
doc_blocks = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("doc_blocks", doc_blocks)
_spec.loader.exec_module(doc_blocks)

PAGES = doc_blocks.pages()
GUIDE = [p for p in PAGES if "api" not in p.relative_to(ROOT).parts]


_FILE_CITATION = re.compile(r"(?i)\bseeds?\s+0\d\d\b")


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.slow  # over 5 s: runs in CI, not in the quick loop
def test_mkdocs_build_is_strict_and_offline(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra (pulled in by the test extra) is not installed")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = tmp_path / "site"
    assert (site / "accounting" / "checkin" / "index.html").is_file()
    # the mathematics renders offline: KaTeX is served with the site, no script or stylesheet from elsewhere
    assert (site / "assets" / "katex" / "katex.min.js").is_file()
    checkin = (site / "accounting" / "checkin" / "index.html").read_text()
    assert checkin.count('class="arithmatex"') >= 10 and "assets/katex/katex.min.js" in checkin
    assert not re.search(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//', checkin), "an asset from a CDN"
    # docstrings' Sphinx roles are links (docs_ext/sphinx_roles.py), never raw text
    for html in (site / "api").rglob("*.html"):
        text = html.read_text()
        assert not re.search(r":(?:mod|func|class|meth|attr|data|exc|obj):", text), f"raw role in {html}"
    api = (site / "api" / "protocols" / "index.html").read_text()
    assert 'class="autorefs autorefs-internal" title="run_secagg_round' in api
    # the API reference renders docstrings: they cite papers by author-year keys too (docs/bibliography.md)
    for html in site.rglob("*.html"):
        assert not _FILE_CITATION.search(html.read_text()), f"{html.relative_to(tmp_path)} cites a paper by file name"


@pytest.mark.slow
@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if any(b.lang in ("python", "console") and not b.skip for b in doc_blocks.blocks(p))],
    ids=_id,
)
def test_code_blocks_run_and_transcripts_match(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # blocks may write simulate-out/
    namespace: dict = {"__name__": "__doc_block__"}
    for block in doc_blocks.blocks(page):
        if block.skip:
            continue
        where = f"{_id(page)}:{block.line}"
        if block.lang == "python":
            exec(compile(block.body, where, "exec"), namespace)  # our own documentation
        elif block.lang == "console":
            for command, expected in doc_blocks.transcript(block.body):
                actual = doc_blocks.run_command(command)
                assert doc_blocks.output_matches(expected, actual), (
                    f"{where}: output of {command!r} drifted; run python tests/tools/doc_blocks.py --write\n"
                    + "\n".join(actual)
                )


_RAW_FORMULA = re.compile(r"[Σ∫][_^]?\{|\be\^\{|expm1\(\(")


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "accounting").glob("*.md")), ids=_id)
def test_accounting_formulas_are_mathematics(page):
    """Formulas are LaTeX between $ (rendered by KaTeX), not raw text such as Σ_{k≥1} or e^{(λ−1)ε}."""
    prose = [
        line
        for b, line in _prose_lines(page)
        if not b and "$" not in line  # lines inside code blocks and lines with math are not prose formulas
    ]
    raw = [line for line in prose if _RAW_FORMULA.search(line)]
    assert not raw, raw


def _prose_lines(page: Path) -> list[tuple[bool, str]]:
    """(inside a code block or a display formula?, line) for each line of ``page``, inline code spans removed."""
    out, fenced, display = [], False, False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if line.strip() == "$$":
            display = not display
            continue
        out.append((fenced or display or line.startswith("    "), re.sub(r"`[^`]*`", "", line)))
    return out


def test_skip_markers_are_rare():
    skipped = [f"{_id(b.path)}:{b.line}" for p in PAGES for b in doc_blocks.blocks(p) if b.skip]
    assert len(skipped) <= 3, skipped


def test_wildcard_matches_one_token_only():
    assert doc_blocks.output_matches(["a  1.5  ..."], ["a 1.5 9.93"])
    assert not doc_blocks.output_matches(["a 1.5 ..."], ["a 1.6 9.93"])
    assert not doc_blocks.output_matches(["a ..."], ["a 9.9 s"])


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_pages_cite_papers_not_file_names(page):
    text = page.read_text()
    # papers are cited by author and year (docs/bibliography.md), never by our file names or by tickets
    assert not _FILE_CITATION.search(text), "cite the paper by author and year"
    assert not re.search(r"(?i)\bthe issue\b|\bissue\s+#?\d+\b", text), "the guide describes the software"


def test_every_cli_flag_is_in_the_reference():
    from simulations.cli import build_parser

    text = (ROOT / "docs" / "cli.md").read_text()
    sections = {m.group(1): m.start() for m in re.finditer(r"^## secagg-dp (.+)$", text, re.M)}
    missing = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        for action in subs:
            for name, sub in action.choices.items():
                walk(sub, [*path, name])
        if subs:
            return
        heading = next(
            (
                h
                for h in sections
                if path[0] == h.split()[0] and (len(path) == 1 or path[1] in h.replace("|", " ").split())
            ),
            None,
        )
        if heading is None:
            missing.append(" ".join(path))
            return
        start = sections[heading]
        end = min([s for s in sections.values() if s > start], default=len(text))
        body = text[start:end]
        for a in parser._actions:
            for flag in a.option_strings:
                if flag not in ("-h", "--help") and f"`{flag}" not in body:
                    missing.append(f"{' '.join(path)} {flag}")

    walk(build_parser(), [])
    assert not missing, missing


def test_every_public_name_is_documented():
    from importlib import import_module

    guide = "\n".join(p.read_text() for p in GUIDE).replace("secagg_dp.errors.", "")
    rendered = {
        m.group(1)
        for p in (ROOT / "docs" / "api").glob("*.md")
        for m in re.finditer(r"^::: ([\w.]+)\s*$", p.read_text(), re.M)
    }
    missing = []
    for module_name in [
        "secagg_dp.noise",
        "secagg_dp.quantize",
        "secagg_dp.zq",
        "secagg_dp.crypto",
        "protocols",
        "secagg_dp.accounting",
        "secagg_dp.errors",
        "secagg_dp.rng",
        "secagg_dp.plan",
    ]:
        mod = import_module(module_name)
        for name in mod.__all__:
            in_guide = re.search(rf"(?<![\w.]){re.escape(name)}\b", guide)
            if not in_guide and module_name not in rendered:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"neither in the guide nor in an API reference page: {missing}"


def test_readme_is_a_short_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200


def test_config_table_lists_every_key():
    """docs/simulator.md's config table names every key of every config section (simulations.config)."""
    import dataclasses

    from simulations import config as c

    text = (ROOT / "docs" / "simulator.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (top level|`\[\w+\]`) \|(.*)\|\s*$", text, re.M)}
    sections = {
        "`[population]`": c.Population,
        "`[secagg]`": c.SecAggParams,
        "`[privacy]`": c.PrivacyParams,
        "`[task]`": c.TaskParams,
        "`[study]`": c.StudyParams,
    }
    missing = [
        f"{s} {f.name}"
        for s, cls in sections.items()
        for f in dataclasses.fields(cls)
        if not re.search(rf"`{f.name}\b", rows[s])
    ]
    nested = {"population", "secagg", "privacy", "task", "study"}
    top = rows["top level"]
    missing += [f"top level {f.name}" for f in dataclasses.fields(c.SimConfig) if f.name not in nested | {"raw"}]
    missing = [m for m in missing if not (m.startswith("top level ") and f"`{m.split()[-1]}`" in top)]
    assert not missing, missing
