"""Findings 2 and 4: what an agent can plant under memories/ or sessions/ — symlinks leading
elsewhere in the workspace, link loops, hidden files, oversized skills, FIFOs — never makes the
memory pipeline or its tools touch another file, recurse, grow without bound, or hang. Every
test that could hang has a timeout."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from memory_doubles import scripted_agent

from sandmem import (
    Filesystem,
    Memory,
    MemoryGenerateConfig,
    MemoryReadConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    SandboxSession,
    Shell,
    UnixLocalSandboxClient,
    UserError,
)
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._scoped_tools import scoped_tools
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest

PATHS = MemoryPaths("memories", "sessions")
EXTRACTIVE = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")
HANG_LIMIT_S = 30.0


def _segment(rid: str, text: str) -> str:
    segment = {
        "updated_at": "2026-01-01T00:00:00.000Z",
        "rollout_id": rid,
        "input": [{"role": "user", "content": text}],
        "generated_items": [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": "pytest -q"}),
            },
            {"type": "function_call_output", "call_id": "c1", "output": "Exit code: 0\n3 passed"},
            {"role": "assistant", "content": "Fixed: the tests pass with `pytest -q`."},
        ],
        "final_output": "Fixed: the tests pass with `pytest -q`.",
        "terminal_metadata": {
            "terminal_state": "completed",
            "exception_type": None,
            "exception_message": None,
            "has_final_output": True,
        },
    }
    return json.dumps(segment) + "\n"


@pytest.fixture
async def ws(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        await session.write("src/app.py", "print('app')\n")
        await session.write("README.md", "# readme\n")
        await session.write("config/settings.yaml", "password: hunter2-Secret9\n")
        await session.write("sessions/r1.jsonl", _segment("r1", "fix the failing test in src"))
        await session.mkdir("memories/skills")
        yield session


def _outside_memory(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file()
        and not p.is_symlink()
        and not str(p.relative_to(root)).startswith(("memories", "sessions"))
    }


async def _flush(session: SandboxSession, config: MemoryGenerateConfig = EXTRACTIVE) -> object:
    manager = get_manager(session, PATHS, config)
    manager.detach_stop_hook()
    return await asyncio.wait_for(manager.flush(), HANG_LIMIT_S)


async def _call(session: SandboxSession, name: str, **args: object) -> object:
    tools = {
        t.name: t
        for t in scoped_tools(session, "memories", skill_file_max_bytes=1000, skills_max_bytes=1500)
    }
    return await tools[name].on_invoke(json.dumps(args))


async def test_a_skill_dir_linked_to_src_is_never_written_through(ws: SandboxSession) -> None:
    os.symlink("../../src", ws.root / "memories/skills/evil")
    before = _outside_memory(ws.root)
    with pytest.raises(Exception, match="symlink"):
        await _call(ws, "write_file", path="memories/skills/evil/app.py", content="pwned")
    with pytest.raises(Exception, match="symlink"):
        await _call(
            ws,
            "apply_patch",
            patch="*** Begin Patch\n*** Add File: memories/skills/evil/new.py\n+x\n*** End Patch\n",
        )
    assert "evil" not in str(await _call(ws, "list_files", path="memories"))
    await _flush(ws)
    assert _outside_memory(ws.root) == before


async def test_memory_md_linked_to_readme_is_replaced_not_followed(ws: SandboxSession) -> None:
    os.symlink("../README.md", ws.root / "memories/MEMORY.md")
    os.symlink("../README.md", ws.root / "memories/memory_summary.md")
    report = await _flush(ws)
    assert (ws.root / "README.md").read_text() == "# readme\n"
    assert not (ws.root / "memories/MEMORY.md").is_symlink()
    assert "pytest" in (ws.root / "memories/MEMORY.md").read_text()
    assert report.phase_two == "done"


async def test_redaction_pass_never_rewrites_a_linked_config(ws: SandboxSession) -> None:
    os.symlink("../../config", ws.root / "memories/skills/cfg")
    before = _outside_memory(ws.root)
    await _flush(ws)
    assert _outside_memory(ws.root) == before
    assert (ws.root / "config/settings.yaml").read_text() == "password: hunter2-Secret9\n"


async def test_a_link_loop_under_skills_is_skipped(ws: SandboxSession) -> None:
    os.symlink("..", ws.root / "memories/skills/loop")
    os.symlink("loop2", ws.root / "memories/skills/loop2")
    report = await _flush(ws)
    assert report.phase_two == "done"
    listed = str(await _call(ws, "list_files", path="memories/skills"))
    assert "loop" not in listed
    assert "(no matches)" in str(await _call(ws, "search_files", pattern="zzz-none"))


async def test_hidden_paths_are_refused_for_writes(ws: SandboxSession) -> None:
    for path in ("memories/skills/.cache/SKILL.md", "memories/skills/x/.hidden.md"):
        with pytest.raises(UserError, match="hidden"):
            await _call(ws, "write_file", path=path, content="token=abc123secret")
    patch = "*** Begin Patch\n*** Add File: memories/skills/.c/SKILL.md\n+x\n*** End Patch\n"
    with pytest.raises(UserError, match="hidden"):
        await _call(ws, "apply_patch", patch=patch)
    assert not (ws.root / "memories/skills/.cache").exists()
    assert not (ws.root / "memories/skills/.c").exists()


async def test_skills_have_a_size_budget_per_file_and_in_total(ws: SandboxSession) -> None:
    with pytest.raises(UserError, match="per skill file"):
        await _call(ws, "write_file", path="memories/skills/big/SKILL.md", content="x" * 1001)
    await _call(ws, "write_file", path="memories/skills/a/SKILL.md", content="x" * 900)
    with pytest.raises(UserError, match="budget of 1500"):
        await _call(ws, "write_file", path="memories/skills/b/SKILL.md", content="y" * 700)
    await _call(ws, "write_file", path="memories/skills/a/SKILL.md", content="x" * 950)  # rewrite
    assert not (ws.root / "memories/skills/big").exists()
    assert not (ws.root / "memories/skills/b").exists()


async def test_an_oversized_skill_fails_the_consolidation(ws: SandboxSession) -> None:
    await ws.write("memories/skills/huge/SKILL.md", "z" * 2000)
    config = EXTRACTIVE.model_copy(update={"skill_file_max_bytes": 1000})
    report = await _flush(ws, config)
    assert report.phase_two == "failed"
    assert "per skill file" in str(report.phase_two_error)


def test_skill_budgets_are_validated() -> None:
    assert EXTRACTIVE.skill_file_max_bytes == 64_000
    assert EXTRACTIVE.skills_max_bytes == 1_000_000
    for field in ("skill_file_max_bytes", "skills_max_bytes"):
        with pytest.raises(ValueError):
            MemoryGenerateConfig(**{field: 0})


# -- finding 2: FIFOs where memory files are expected ------------------------------------------


async def test_a_fifo_rollout_is_skipped_and_the_flush_ends(ws: SandboxSession) -> None:
    os.mkfifo(ws.root / "sessions/r2.jsonl")
    report = await _flush(ws)
    assert report.processed == ["r1"]
    assert report.timed_out is False


async def test_fifo_memory_files_never_hang_a_run_or_a_flush(ws: SandboxSession) -> None:
    os.mkfifo(ws.root / "memories/memory_summary.md")
    os.mkfifo(ws.root / "memories/skills/pipe.md")
    agent = SandboxAgent(
        name="worker",
        model=scripted_agent(lambda request: "done"),
        capabilities=[Filesystem(), Shell(), Memory(read=MemoryReadConfig(), generate=EXTRACTIVE)],
    )
    run = Runner.run(agent, "hello", run_config=RunConfig(sandbox=SandboxRunConfig(session=ws)))
    result = await asyncio.wait_for(run, HANG_LIMIT_S)
    assert result.final_output == "done"
    report = await _flush(ws)
    assert report.timed_out is False
    assert report.phase_two in ("done", "failed")
