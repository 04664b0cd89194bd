"""Every script in examples/ runs to completion (so the examples cannot drift from the library)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_examples_are_documented_scripts():
    assert 4 <= len(EXAMPLES) <= 8
    for path in EXAMPLES:
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and f"python examples/{path.name}" in doc, f"{path.name}: docstring must say how to run it"
        assert 'if __name__ == "__main__":' in path.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), "an example prints what it shows"
