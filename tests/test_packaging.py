"""Packaging niceties: `secagg-dp --version`, the PEP 561 marker, the simulator's output folder ignored."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import secagg_dp
from simulations.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_version_flag_prints_the_package_version(capsys):
    assert main(["--version"]) == 0  # main returns argparse's exit code instead of raising SystemExit
    # the installed distribution's metadata is an independent record of the version setuptools built
    assert capsys.readouterr().out.strip() == f"secagg-dp {importlib.metadata.version('secagg-dp')}"
    assert secagg_dp.__version__ == importlib.metadata.version("secagg-dp")


def test_py_typed_marker_ships_with_the_library():
    assert (ROOT / "secagg_dp" / "py.typed").is_file()
    assert 'secagg_dp = ["py.typed"]' in (ROOT / "pyproject.toml").read_text()


def test_simulate_default_output_folder_is_ignored_by_git():
    assert "simulate-out/" in (ROOT / ".gitignore").read_text().splitlines()


def test_python_dash_m_runs_the_cli_from_a_checkout():
    # `python -m simulations.cli` is the command without the installed `secagg-dp` script (e.g. in a worktree)
    import subprocess
    import sys

    from secagg_dp import __version__

    out = subprocess.run(
        [sys.executable, "-m", "simulations.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"secagg-dp {__version__}"
