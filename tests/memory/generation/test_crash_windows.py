"""Issue 14 (6): crash windows closed — MEMORY.md, memory_summary.md and skills/ change
together or not at all, an edit made after a crash is never discarded, live edits wait for a
running consolidation, and the state is reconciled with the files at every flush."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from memory_doubles import phase_one_model, phase_two_model
from test_faults_crashes_and_concurrency import _start_worker, _wait_for, record, state_of

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryReadConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.layout import MemoryPaths
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call, tool_outputs

PATHS = MemoryPaths("memories", "sessions")


def _first_then(workspace: Path, mode: str) -> tuple[bytes, bytes]:
    proc = _start_worker(workspace, "first", 1, "normal")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    memories = workspace / "memories"
    return (memories / "MEMORY.md").read_bytes(), (memories / "memory_summary.md").read_bytes()


def _kill_in_commit_switch(workspace: Path) -> None:
    proc = _start_worker(workspace, "second", 1, "slow-commit")
    try:
        assert proc.stdout is not None
        _wait_for(lambda: proc.stdout.readline().strip() == "switching")  # type: ignore[union-attr]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)


async def _run_start(workspace: Path) -> None:
    """A new run on the workspace (read only): it reads the summary."""
    agent = SandboxAgent(
        name="reader",
        model=FunctionModel(lambda r: "ok"),
        capabilities=[Memory(generate=None, read=MemoryReadConfig()), Filesystem(), Shell()],
    )
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=workspace)) as sb:
        await Runner.run(agent, "hi", run_config=RunConfig(sandbox=SandboxRunConfig(session=sb)))


async def test_a_kill_in_the_commit_switch_is_rolled_forward_before_memory_is_read(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    memory_before, summary_before = _first_then(workspace, "normal")
    _kill_in_commit_switch(workspace)
    memories = workspace / "memories"
    assert (memories / ".phase_two_commit.json").exists()
    # the killed commit had switched MEMORY.md only
    assert (memories / "MEMORY.md").read_bytes() != memory_before
    assert (memories / "memory_summary.md").read_bytes() == summary_before
    await _run_start(workspace)  # the next use finishes the switch before reading
    assert not (memories / ".phase_two_commit.json").exists()
    assert not (memories / ".phase_two_stage").exists()
    assert "second task 0" in (memories / "MEMORY.md").read_text()
    assert (memories / "memory_summary.md").read_bytes() != summary_before
    selection = json.loads((memories / "phase_two_selection.json").read_text())
    assert sorted(s["rollout_id"] for s in selection["selected"]) == ["first", "second"]


async def test_an_edit_made_after_an_interrupted_commit_is_kept(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    _first_then(workspace, "normal")
    _kill_in_commit_switch(workspace)
    memories = workspace / "memories"
    edit = "My own summary, written after the crash.\n"
    (memories / "memory_summary.md").write_text(edit)
    await _run_start(workspace)  # finishes the interrupted commit
    assert "second task 0" in (memories / "MEMORY.md").read_text()
    assert not (memories / ".phase_two_commit.json").exists()
    assert (memories / "memory_summary.md").read_text() == edit  # not overwritten
    log = (memories / "generation_log.jsonl").read_text()
    assert "edited after an interrupted commit" in log


async def test_an_edit_after_a_kill_mid_consolidation_reaches_the_next_one(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    before, _ = _first_then(workspace, "normal")
    proc = _start_worker(workspace, "second", 1, "slow-two")
    memories = workspace / "memories"
    try:
        _wait_for(lambda: (memories / ".phase_two_stage/MEMORY.md").exists())
        _wait_for(lambda: (memories / ".phase_two_stage/MEMORY.md").read_bytes() == b"half")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert (memories / "MEMORY.md").read_bytes() == before
    edited = before.decode() + "- Deploys need the VPN (added by hand after the crash)\n"
    (memories / "MEMORY.md").write_text(edited)
    seen: list[str] = []

    def keeper(request: object) -> object:
        seen.append(getattr(request, "instructions", "") or "")
        if not tool_outputs(request):  # type: ignore[arg-type]
            return [tool_call("read_file", {"path": "memories/MEMORY.md"})]
        if len(tool_outputs(request)) == 1:  # type: ignore[arg-type]
            current = str(tool_outputs(request)[0]["output"])  # type: ignore[arg-type]
            new = current + "\nSources: rollout_summaries/second_fix-the-bug.md\n"
            return [
                tool_call("write_file", {"path": "memories/MEMORY.md", "content": new}),
                tool_call("write_file", {"path": "memories/memory_summary.md", "content": "s"}),
            ]
        return "kept"

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(keeper)
    )
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=workspace)) as sb:
        manager = get_manager(sb, PATHS, config)
        manager.detach_stop_hook()
        report = await manager.flush()
    assert report.phase_two == "done", report.phase_two_error
    assert "added by hand after the crash" in seen[0]  # shown to the consolidation as an edit
    assert "added by hand after the crash" in (memories / "MEMORY.md").read_text()


async def test_a_live_edit_waits_for_a_running_consolidation(tmp_path: Path) -> None:
    config = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
    patch = "*** Begin Patch\n*** Add File: memories/notes.md\n+a live note\n*** End Patch\n"
    agent = SandboxAgent(
        name="editor",
        model=FunctionModel(
            lambda r: "done" if tool_outputs(r) else [tool_call("apply_patch", {"patch": patch})]
        ),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with sandbox:
        get_manager(sandbox, PATHS, config).detach_stop_hook()
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        async with sandbox.lock("memories/.lock"):  # as a consolidation holds it
            task = asyncio.ensure_future(Runner.run(agent, "note it", run_config=run))
            for _ in range(20):
                await asyncio.sleep(0.01)
            assert not task.done()
            assert not (sandbox.root / "memories/notes.md").exists()
        await task
        assert (sandbox.root / "memories/notes.md").read_text() == "a live note\n"
        # an edit elsewhere in the workspace does not wait
        other = patch.replace("memories/notes.md", "notes.md")
        async with sandbox.lock("memories/.lock"):
            tools = {t.name: t for t in Filesystem().bind(sandbox).tools()}  # type: ignore[union-attr]
            await asyncio.wait_for(tools["apply_patch"].on_invoke(json.dumps({"patch": other})), 5)
        assert (sandbox.root / "notes.md").exists()


async def test_the_state_is_reconciled_with_the_files_at_every_flush(tmp_path: Path) -> None:
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with sandbox:
        await record(sandbox, config, ["a", "b"])
    root = sandbox.root
    # what a kill between the raw memory write and the state write leaves: the state as it
    # was before the extraction (pending, no raw memory seen yet)
    state = json.loads((root / "memories/generation_state.json").read_text())
    for entry in state["rollouts"].values():
        entry.update(status="pending", attempts=1, last_error="killed", raw_stat=None)
    (root / "memories/generation_state.json").write_text(json.dumps(state))
    calls = []

    def counting(request: object) -> object:
        calls.append(request)
        return phase_one_model()._fn(request)  # type: ignore[arg-type]

    counted = config.model_copy(update={"phase_one_model": FunctionModel(counting)})
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=root)) as sb:
        manager = get_manager(sb, PATHS, counted)
        manager.detach_stop_hook()
        report = await manager.flush()
    assert calls == [] and report.processed == []
    assert {rid: e["status"] for rid, e in state_of(root).items()} == {"a": "done", "b": "done"}
    assert {e["attempts"] for e in state_of(root).values()} == {0}


async def test_an_edit_that_bypasses_the_lock_makes_the_commit_wait_for_next_time(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"

    def sneaky(request: object) -> object:
        if not tool_outputs(request):  # type: ignore[arg-type]
            (root / "memories/MEMORY.md").write_text("- edited from a shell meanwhile\n")
            memory = "## x\nSources: rollout_summaries/a_fix-the-bug.md\n"
            return [
                tool_call("write_file", {"path": "memories/MEMORY.md", "content": memory}),
                tool_call("write_file", {"path": "memories/memory_summary.md", "content": "s"}),
            ]
        return "done"

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(sneaky)
    )
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=root)) as sb:
        manager = get_manager(sb, PATHS, config)
        manager.detach_stop_hook()
        await manager.record(
            {
                "updated_at": "2026-01-01T00:00:00Z",
                "rollout_id": "a",
                "input": [{"role": "user", "content": "task"}],
                "generated_items": [],
                "terminal_metadata": {"terminal_state": "completed"},
            }
        )
        report = await manager.flush()
    assert report.phase_two == "failed"
    assert "changed while consolidating" in (report.phase_two_error or "")
    assert (root / "memories/MEMORY.md").read_text() == "- edited from a shell meanwhile\n"
    assert not (root / "memories/phase_two_selection.json").exists()
