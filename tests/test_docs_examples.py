"""Every ```python block in docs/ runs offline, except blocks opening with ``# not run``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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
def test_doc_block_runs(where: str, code: str, tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, f"{where} failed:\n{result.stderr}"
