"""The runnable parts of README.md and docs/: ```python blocks and ```console transcripts.

* ```python blocks run, page by page, in one namespace per page (a later block may use an earlier one's
  names), with the working directory set to a temporary folder per page; a transcript may read the files
  an earlier ```python block of its page wrote (regeneration runs them too). A block preceded by the line
  ``<!-- skip -->`` is not run (for fragments that need a deployment); keep those rare.
* ```console blocks are transcripts: each ``$ secagg-dp ...`` line is a command and the lines up to the
  next ``$`` line are its output, compared token by token (runs of spaces are equal); a token ``...``
  matches any one token (for timings). Only otherwise deterministic commands belong in them.

Regenerate every transcript after a change that moves a number (then review the diff)::

    python tests/tools/doc_blocks.py --write

Without ``--write`` the script reports the transcripts that drifted and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = "<!-- skip -->"
_FENCE = re.compile(r"^```(\w+)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    skip: bool


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with its language tag and whether a skip marker precedes it."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j].rstrip() != "```":
                j += 1
            skip = i > 0 and lines[i - 1].strip() == SKIP
            out.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1 : j]), skip))
            i = j
        i += 1
    return out


def transcript(body: str) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) pairs of a console block."""
    pairs: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:].strip(), []))
        elif pairs:
            pairs[-1][1].append(line.rstrip())
    return pairs


def run_command(command: str) -> list[str]:
    """Run one ``secagg-dp ...`` command in-process; return its stdout lines (stderr is not part of it)."""
    from simulations.cli import main

    argv = shlex.split(command)
    if not argv or argv[0] != "secagg-dp":
        raise ValueError(f"console transcripts run only secagg-dp commands, not {command!r}")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            rc = main(argv[1:])
        except SystemExit as exc:  # --help / --version exit through argparse
            rc = exc.code
    if rc not in (0, None):
        raise RuntimeError(f"{command!r} exited with {rc}")
    return [line.rstrip() for line in buf.getvalue().rstrip("\n").splitlines()]


WILDCARD = "..."


def line_matches(expected: str, actual: str) -> bool:
    """Token-wise equality; a ``...`` token in ``expected`` matches any one token."""
    e, a = expected.split(), actual.split()
    return len(e) == len(a) and all(x == WILDCARD or x == y for x, y in zip(e, a, strict=True))


def output_matches(expected: list[str], actual: list[str]) -> bool:
    return len(expected) == len(actual) and all(line_matches(e, a) for e, a in zip(expected, actual, strict=True))


def render(pairs: list[tuple[str, list[str]]]) -> str:
    return "\n".join(line for cmd, out in pairs for line in (f"$ {cmd}", *out))


def _page_outputs(path: Path) -> list[tuple[Block, list[tuple[str, list[str], list[str]]]]]:
    """Run ``path``'s blocks in order as the test suite does (one namespace, a fresh working folder, so a
    transcript may read a file an earlier ```python block wrote); per console block, (command, expected,
    actual) for each command."""
    out: list[tuple[Block, list[tuple[str, list[str], list[str]]]]] = []
    namespace: dict[str, object] = {"__name__": "__doc_block__"}
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        for b in blocks(path):
            if b.skip:
                continue
            if b.lang == "python":
                with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    exec(compile(b.body, f"{path.name}:{b.line}", "exec"), namespace)  # our docs
            elif b.lang == "console":
                out.append((b, [(cmd, expected, run_command(cmd)) for cmd, expected in transcript(b.body)]))
    return out


def regenerate(path: Path) -> bool:
    """Rewrite the console transcripts of ``path`` from the real commands; True if anything changed."""
    text = path.read_text()
    new = text
    for b, runs in _page_outputs(path):
        pairs = [(cmd, expected if output_matches(expected, actual) else actual) for cmd, expected, actual in runs]
        new = new.replace(f"```console\n{b.body}\n```", f"```console\n{render(pairs)}\n```", 1)
    if new != text:
        path.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite drifted transcripts in place")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):  # commands may write simulate-out/
        return _check_or_write(args.write)


def _check_or_write(write: bool) -> int:
    drifted = 0
    for page in pages():
        if write:
            if regenerate(page):
                print(f"rewrote {page.relative_to(ROOT)}")
            continue
        for b, runs in _page_outputs(page):
            for cmd, expected, actual in runs:
                if not output_matches(expected, actual):
                    drifted += 1
                    print(f"{page.relative_to(ROOT)}:{b.line}: output of {cmd!r} drifted")
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
