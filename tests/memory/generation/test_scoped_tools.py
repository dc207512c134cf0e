"""The consolidation agent's write_files tool: several memory files in one call, all paths
checked before anything is written."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandmem import SandboxSession, UserError
from sandmem.memory.generation._scoped_tools import scoped_tools
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        await session.write("memories/MEMORY.md", "old")
        yield session


async def _write_files(session: SandboxSession, files: list[dict[str, str]]) -> str:
    tools = {t.name: t for t in scoped_tools(session, "memories")}
    return str(await tools["write_files"].on_invoke(json.dumps({"files": files})))


async def test_write_files_writes_both_memory_files_in_one_call(sandbox: SandboxSession) -> None:
    out = await _write_files(
        sandbox,
        [
            {"path": "memories/MEMORY.md", "content": "## Group\n"},
            {"path": "memories/memory_summary.md", "content": "summary"},
            {"path": "memories/skills/run/SKILL.md", "content": "steps"},
        ],
    )
    assert out.count("wrote ") == 3
    assert (sandbox.root / "memories/MEMORY.md").read_text() == "## Group\n"
    assert (sandbox.root / "memories/memory_summary.md").read_text() == "summary"
    assert (sandbox.root / "memories/skills/run/SKILL.md").read_text() == "steps"


@pytest.mark.parametrize(
    "bad",
    ["memories/raw_memories/a.md", "secret.txt", "memories/../x.md", "/etc/passwd"],
)
async def test_one_refused_path_writes_nothing(sandbox: SandboxSession, bad: str) -> None:
    files = [
        {"path": "memories/memory_summary.md", "content": "new"},
        {"path": bad, "content": "x"},
    ]
    with pytest.raises(UserError):
        await _write_files(sandbox, files)
    assert (sandbox.root / "memories/MEMORY.md").read_text() == "old"
    assert not (sandbox.root / "memories/memory_summary.md").exists()


async def test_write_files_needs_a_file(sandbox: SandboxSession) -> None:
    with pytest.raises(UserError, match="at least one"):
        await _write_files(sandbox, [])
