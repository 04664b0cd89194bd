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


def _flower_run_module():
    """examples/flower_app/run.py as a module (it imports Flower only inside main, after the checks)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("flower_app_run", ROOT / "examples" / "flower_app" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sample", "6", "--nodes", "4"], "Argument '--sample' must be an integer in [2, 4], not 6."),
        (["--threshold", "9"], "Argument '--threshold' must be an integer in [2, 6], not 9."),
        (["--z", "-1"], "Argument '--z' must lie in (0, inf], not -1.0."),
        (["--rounds", "0"], "Argument '--rounds' must be an integer >= 1, not 0."),
        (["--fail", "8"], "Argument '--fail' must name partition ids in [0, 7], not '8'."),
        (["--nodes", "1"], "Argument '--nodes' must be an integer"),
    ],
)
def test_flower_example_refuses_bad_arguments_before_flower(argv, message, monkeypatch, capsys):
    """Pure validation (no Flower needed): the flag is named, and main exits 2 with one line before it would
    import Flower (blocked here, so reaching the import would raise ImportError instead)."""
    from secagg_dp.errors import ParameterError

    monkeypatch.setattr(sys, "path", list(sys.path))  # run.py puts its folder first: undone after the test
    run = _flower_run_module()
    with pytest.raises(ParameterError) as err:
        run.check_args(run.build_parser().parse_args(argv))
    assert str(err.value).startswith(message)
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(SystemExit) as exit_:
        run.main(argv)
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"run.py: error: {message}")


def test_flower_example_accepts_its_defaults_and_makes_its_out_folder(tmp_path, monkeypatch, capsys):
    from secagg_dp.errors import ParameterError

    monkeypatch.setattr(sys, "path", list(sys.path))
    run = _flower_run_module()
    cfg = run.check_args(run.build_parser().parse_args([]))
    assert (cfg.population, cfg.sample_size, cfg.threshold) == (8, 6, 5)  # t = floor(2 * 6 / 3) + 1
    run.prepare_out(str(tmp_path / "a" / "b"))  # before: a traceback after Flower's ~28 s start
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "f").write_text("")
    with pytest.raises(ParameterError, match="Argument '--out' must be a folder"):
        run.prepare_out(str(tmp_path / "f"))
    monkeypatch.setitem(sys.modules, "flwr", None)  # Flower missing: one line naming the extra, exit 2
    with pytest.raises(SystemExit) as exit_:
        run.main(["--out", str(tmp_path / "c")])
    assert exit_.value.code == 2 and "secagg-dp[flower]" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
