"""Shared fixtures of the accounting tests."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest


def _run_until_killed(script: str, path, at_least: int) -> int:
    """Run ``script`` (argv[1] = ``path``), read the count it prints after each acknowledged spend, and
    SIGKILL it once it acknowledged ``at_least`` + 1 spends (or after 60 s); return the last count read."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True)
    acknowledged = -1
    try:
        deadline = time.time() + 60
        while acknowledged < at_least and time.time() < deadline:
            line = proc.stdout.readline()
            if line:
                acknowledged = int(line.split()[0])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    return acknowledged


@pytest.fixture
def run_until_killed() -> Callable[[str, object, int], int]:
    return _run_until_killed
