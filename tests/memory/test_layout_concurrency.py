"""Layout creation and repair under concurrency: parallel notes and edits on a fresh workspace,
from tasks of one process, from threads (each its own loop and session) and from processes.
Every acknowledged write is kept, and each edit is its own attributed version."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest

from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig
from sandmem.memory.mcp import ServerOptions
from sandmem.memory.mcp._tools import Caller, MemoryTools

CONFIG = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)


def _tools(workspace: Path) -> MemoryTools:
    return MemoryTools(ServerOptions(str(workspace), MemoryLayoutConfig(), CONFIG))


def _fresh(workspace: Path) -> None:
    """A workspace as a starting ``sandmem mcp`` leaves it: the layout and nothing else."""
    from sandmem.memory.mcp._server import MemoryMCPServer

    options = ServerOptions(str(workspace), MemoryLayoutConfig(), CONFIG)
    asyncio.run(MemoryMCPServer(options).prepare())
    assert not (workspace / "sessions" / ".lock").exists()


def _notes(workspace: Path) -> list[str]:
    rollout = workspace / "sessions" / "mcp-notes.jsonl"
    found = []
    for line in rollout.read_text().splitlines():
        segment = json.loads(line)
        found.append(json.dumps(segment["input"]))
    return found


def _held(workspace: Path, texts: list[str]) -> list[str]:
    notes = "\n".join(_notes(workspace))
    return [t for t in texts if t not in notes]


async def _remember(workspace: Path, texts: list[str]) -> list[str]:
    tools = _tools(workspace)
    caller = Caller(client="probe")
    return await asyncio.gather(
        *(tools.call("memory_remember", {"text": t}, caller) for t in texts)
    )


def test_twenty_parallel_notes_on_a_fresh_workspace_are_all_kept(tmp_path: Path) -> None:
    _fresh(tmp_path)
    texts = [f"note number {i} about the invoice parser" for i in range(20)]
    answers = asyncio.run(_remember(tmp_path, texts))
    assert all(a.startswith("Recorded") for a in answers)
    assert _held(tmp_path, texts) == []
    assert len(_notes(tmp_path)) == 20
    assert not list((tmp_path / "sessions").glob("*.moved-*"))
    assert not list((tmp_path / "memories").glob("*.moved-*"))


def test_notes_from_threads_with_their_own_loops_are_all_kept(tmp_path: Path) -> None:
    _fresh(tmp_path)
    texts = [[f"thread {t} note {i}" for i in range(4)] for t in range(5)]
    answers: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(len(texts))

    def work(batch: list[str]) -> None:
        start.wait()
        try:
            answers.append(asyncio.run(_remember(tmp_path, batch)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(batch,)) for batch in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert all(a.startswith("Recorded") for batch in answers for a in batch)
    assert _held(tmp_path, [t for batch in texts for t in batch]) == []
    assert not list(tmp_path.rglob("*.moved-*"))


def _process_notes(workspace: str, texts: list[str], start: Any) -> None:
    start.wait()
    asyncio.run(_remember(Path(workspace), texts))


def test_notes_from_processes_are_all_kept(tmp_path: Path) -> None:
    _fresh(tmp_path)
    texts = [[f"process {p} note {i}" for i in range(3)] for p in range(4)]
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(len(texts))
    procs = [
        ctx.Process(target=_process_notes, args=(str(tmp_path), batch, start)) for batch in texts
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    assert _held(tmp_path, [t for batch in texts for t in batch]) == []
    assert not list(tmp_path.rglob("*.moved-*"))


def _skill_patch(i: int) -> str:
    return (
        f"*** Begin Patch\n*** Add File: memories/skills/s{i}/SKILL.md\n"
        f"+# skill {i}\n+step {i}\n*** End Patch\n"
    )


@pytest.mark.parametrize("fresh", [True, False])
def test_each_parallel_update_is_its_own_attributed_version(tmp_path: Path, fresh: bool) -> None:
    _fresh(tmp_path)
    if not fresh:
        asyncio.run(_remember(tmp_path, ["warm up"]))
    asyncio.run(_updates(tmp_path))


async def _updates(tmp_path: Path) -> None:
    from sandmem.memory import log

    tools = _tools(tmp_path)
    n = 8
    answers = await asyncio.gather(
        *(
            tools.call("memory_update", {"patch": _skill_patch(i)}, Caller(client=f"client-{i}"))
            for i in range(n)
        )
    )
    for i, answer in enumerate(answers):
        assert f"skills/s{i}/SKILL.md" in answer, answer
    for i in range(n):
        text = (tmp_path / f"memories/skills/s{i}/SKILL.md").read_text()
        assert f"step {i}" in text
    versions = await log(str(tmp_path))
    writes = [v for v in versions if v.kind == "mcp_write"]
    assert len(writes) == n
    for version in writes:
        # the version a client's edit made holds that client's file and no other's
        i = int(str(version.client).split("-")[1])
        skills = [name for name in version.changed if name.startswith("skills/")]
        assert skills == [f"skills/s{i}/SKILL.md"], (version.client, version.changed)


@pytest.mark.parametrize("step", ["stat_many", "exists", "rename"])
async def test_repair_never_moves_a_file_created_while_it_looks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The race of the issue, made deterministic: another process creates the lock file
    just before each of make_way's looks at its name; it is never taken for a plant."""
    from sandmem.memory import _files
    from sandmem.memory.layout import make_way
    from sandmem.sandboxes import Manifest, UnixLocalSandboxClient

    (tmp_path / "sessions").mkdir()
    real = getattr(_files, step)
    created = False

    async def racing(*args: Any, **kwargs: Any) -> Any:
        nonlocal created
        if not created:
            created = True
            before = await real(*args, **kwargs) if step == "stat_many" else None
            (tmp_path / "sessions/.lock").write_text("")  # another process creates it now
            if step == "stat_many":
                return before  # it saw nothing
        return await real(*args, **kwargs)

    monkeypatch.setattr(_files, step, racing)
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path))
    async with session:
        await make_way(session, "sessions/.lock")
    assert created
    assert (tmp_path / "sessions/.lock").is_file()
    assert not list((tmp_path / "sessions").glob("*.moved-*"))
