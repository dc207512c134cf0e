"""No memory write goes through a hard link: an append to a rollout or memory file linked
outside, a rollout file hard-linked outside (issue 25, class 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from memory_doubles import steps_model as _script

from sandmem import (
    Filesystem,
    Manifest,
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    UnixLocalSandboxClient,
)

EXTRACTIVE = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")


# -- class 3: no writes through hard links -------------------------------------------------


@pytest.mark.parametrize("path", ["sessions/r.jsonl", "memories/MEMORY.md", "memories/x/y.md"])
async def test_append_never_writes_through_a_hard_link(path: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"host file\n")
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    async with sandbox:
        target = sandbox.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(outside, target)
        await sandbox.append(path, b"appended\n")
        await sandbox.append(path, b"again\n")
    assert outside.read_bytes() == b"host file\n"
    assert target.read_bytes() == b"host file\nappended\nagain\n"
    assert target.stat().st_nlink == 1 and outside.stat().st_nlink == 1
    await client.delete(sandbox)


async def test_a_rollout_file_hard_linked_outside_is_replaced_not_grown(tmp_path: Path) -> None:
    outside = tmp_path / "victim.log"
    outside.write_bytes(b"")
    agent = SandboxAgent(
        name="a",
        model=_script("done"),
        capabilities=[Memory(read=None, generate=EXTRACTIVE), Filesystem(), Shell()],
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    (sandbox.root / "sessions").mkdir()
    os.link(outside, sandbox.root / "sessions/hl.jsonl")
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(agent, "hi", run_config=run, conversation_id="hl")
    assert outside.read_bytes() == b""
    assert b'"rollout_id": "hl"' in (sandbox.root / "sessions/hl.jsonl").read_bytes()
    await client.delete(sandbox)
