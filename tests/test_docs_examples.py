"""Every ```python block in docs/ runs offline, except blocks opening with ``# not run``: as
``python -c BLOCK`` in an empty directory with only ``PATH`` and ``HOME`` set (a fork of a
process that has imported sandmem: ``tests/python_forks.py``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from python_forks import PythonForks

DOCS = Path(__file__).parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, str]]:
    found = []
    for path in sorted(DOCS.glob("*.md")):
        for index, code in enumerate(BLOCK.findall(path.read_text())):
            if code.lstrip().startswith("# not run"):
                continue
            found.append((f"{path.name}#{index}", code))
    return found


@pytest.mark.parametrize(("where", "code"), _blocks(), ids=[w for w, _ in _blocks()])
def test_doc_block_runs(where: str, code: str, tmp_path: Path, python_forks: PythonForks) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = python_forks.run([sys.executable, "-c", code], timeout=120, cwd=tmp_path, env=env)
    assert result.returncode == 0, f"{where} failed:\n{result.stderr}"
