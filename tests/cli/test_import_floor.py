"""A memory command imports what it runs: ``sandmem memory status``, ``list`` and
``search`` load neither the agent runtime nor ``openai``, ``rich``, the generation pipeline or
the optional extras (their import would be most of a cold command's time), and ``import
sandmem`` alone imports none of the package's folders."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

_PROBE = """
import json, sys
from sandmem.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="sandmem", standalone_mode=False)
finally:
    sys.stdout.flush()
    print("\\n" + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""

#: never imported by a command that only looks at memory
HEAVY = (
    "openai",
    "rich",
    "boto3",
    "redis",
    "opentelemetry",
    "sandmem.agent._agent",
    "sandmem.run",
    "sandmem.capabilities",
    "sandmem.memory.generation.manager",
    "sandmem.memory.ingestion",
    "sandmem.memory.mcp",
    "sandmem.redaction",
    "sandmem.sandboxes._bubblewrap",
)


def _modules(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "command", [["status"], ["list", "--limit", "5"], ["search", "invoice"]], ids=str
)
def test_a_memory_command_imports_only_what_it_runs(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "sessions").mkdir()
    (tmp_path / "memories").mkdir()
    loaded = _modules("memory", *command, "-w", str(tmp_path))
    assert "sandmem.memory.views._index" in loaded  # it did run
    heavy = sorted(m for m in loaded if m.startswith(HEAVY))
    assert heavy == []


def test_import_sandmem_imports_no_folder() -> None:
    code = "import json, sys, sandmem; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ours = [m for m in json.loads(done.stdout) if m.startswith("sandmem.")]
    assert ours and all(m.count(".") == 1 and m.split(".")[1].startswith("_") for m in ours)
