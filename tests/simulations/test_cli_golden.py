"""Every printed and recorded figure of the CLI grid is unchanged since the recorded commit.

The fixture ``data/cli_golden.json`` holds the stdout, stderr and exit status of each command of
``tests/tools/record_cli_golden.py``'s grid, recorded on the commit its ``note`` names (before the "one plan,
one contract" refactor) by running ``simulations.cli.main`` in-process. This test re-runs each command the same
way and compares the text exactly: the floats are compared as the commands print them, so a changed digit in
any certificate, estimate or label fails. Commands that took over a second when recorded are marked slow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from simulations.cli import main

_DATA = json.loads((Path(__file__).parent / "data" / "cli_golden.json").read_text(encoding="utf-8"))


# progress lines a long calibration prints on stderr once it has run a second: wall-clock dependent, not a figure
_PROGRESS = re.compile(r"^calibrate checkin: .* \(\d+\.\d s\)\n", re.M)


def _params() -> list[object]:
    marks = {True: [pytest.mark.slow], False: []}
    return [pytest.param(r, id=r["argv"], marks=marks[bool(r["slow"])]) for r in _DATA["commands"]]


def test_fixture_states_its_origin() -> None:
    assert _DATA["note"].startswith("recorded on commit ")
    assert len(_DATA["commands"]) >= 40


@pytest.mark.parametrize("record", _params())
def test_cli_output_unchanged(record: dict[str, object], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(str(record["argv"]).split())
    out, err = capsys.readouterr()
    expected = (record["exit"], record["stdout"], _PROGRESS.sub("", str(record["stderr"])))
    assert (code, out, _PROGRESS.sub("", err)) == expected
