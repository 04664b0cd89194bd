"""The Python examples of docs/secure-aggregation.md run as written (in order, one namespace)."""

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "secure-aggregation.md"


@pytest.mark.slow
def test_secure_aggregation_page_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 3  # parameters, a round, the same round on an explicit client pool
    ns: dict = {}
    for code in blocks:
        exec(compile(code, str(PAGE), "exec"), ns)  # our own documentation
    assert (ns["k"], ns["t"]) == (74, 50)  # the values the page states
    assert ns["result"].aggregate.tolist() == [sum(range(100))] * 8
    assert ns["res2"].aggregate.tolist() == [sum(range(100))] * 8
