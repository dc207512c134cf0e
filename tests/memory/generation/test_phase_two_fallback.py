"""Degrade, never go blank: a failed or incomplete consolidation by the model leaves the
extractive engine's memory (marked), keeps the model's attempt as the record, and the model
is tried again at the next flush. A copied brief never becomes memory."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import phase_one_model, phase_two_model

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._degrade import FALLBACK_NOTE, brief_lines, strip_brief
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.state import read_log
from sandmem.memory.views._status import memory_status
from sandmem.models._base import ModelRequest
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call, tool_outputs

PATHS = MemoryPaths("memories", "sessions")


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        yield session


def segment(rid: str, task: str, at: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "updated_at": at,
        "rollout_id": rid,
        "input": [{"role": "user", "content": task}],
        "generated_items": [{"role": "assistant", "content": "ran pytest -q: 3 passed"}],
        "terminal_metadata": {"terminal_state": "completed", "has_final_output": True},
    }


async def flush(session: SandboxSession, config: MemoryGenerateConfig) -> Any:
    session._memory_managers.clear()  # type: ignore[attr-defined]
    manager = get_manager(session, PATHS, config)
    manager.detach_stop_hook()
    return await manager.flush()


def writes(memory: str, summary: str) -> FunctionModel:
    """A consolidator that writes both files once (then answers)."""

    def fn(request: ModelRequest) -> Any:
        if tool_outputs(request):
            return "done"
        return [
            tool_call("write_file", {"path": "memories/MEMORY.md", "content": memory}),
            tool_call("write_file", {"path": "memories/memory_summary.md", "content": summary}),
        ]

    return FunctionModel(fn, name="writes")


def crashes(request: ModelRequest) -> Any:
    raise RuntimeError("the local server returned garbage")


#: the ways a small model's consolidation was seen to fail or end incomplete
BROKEN: dict[str, Any] = {
    "writes nothing (MEMORY.md left empty)": lambda: FunctionModel(lambda r: "I am done."),
    "crashes": lambda: FunctionModel(crashes),
    "no Sources: line (incomplete)": lambda: writes("## Tests\n- run pytest -q\n", "Use pytest."),
    "empty summary": lambda: writes("## T\nSources: rollout_summaries/a_fix-the-bug.md\n", " "),
}


@pytest.mark.parametrize("how", sorted(BROKEN))
async def test_a_broken_consolidation_falls_back_to_the_extractive_engine(
    sandbox: SandboxSession, how: str
) -> None:
    good = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    broken = good.model_copy(update={"phase_two_model": BROKEN[how]()})
    await get_manager(sandbox, PATHS, broken).record(segment("a", "make the tests pass"))
    report = await flush(sandbox, broken)

    root = sandbox.root / "memories"
    assert report.phase_two == "fallback"
    assert "extractive engine" in (report.phase_two_error or "")
    summary = (root / "memory_summary.md").read_text()
    assert summary.startswith(FALLBACK_NOTE) and summary.strip() != FALLBACK_NOTE
    memory = (root / "MEMORY.md").read_text()
    assert "rollout_summaries/a_fix-the-bug.md" in memory  # the conversation is in memory
    # the log keeps the model's attempt, then the fallback
    records = [r for r in await read_log(sandbox, PATHS) if r.get("phase") == "two"]
    assert records[-2]["status"] in ("failed", "incomplete") and records[-2]["error"]
    assert records[-1]["status"] == "fallback" and records[-1]["engine"] == "extractive"
    assert records[-1]["error"] == records[-2]["error"]
    status = await memory_status(sandbox, PATHS)
    assert status.last_consolidation is not None
    assert status.last_consolidation.status == "fallback"
    # the selection is left as it was: the next flush gives the model the same conversation
    selection = json.loads((root / "phase_two_selection.json").read_text())
    assert selection["selected"] == []

    retried = await flush(sandbox, good)
    assert retried.phase_two == "done"
    summary = (root / "memory_summary.md").read_text()
    assert not summary.startswith(FALLBACK_NOTE)
    selection = json.loads((root / "phase_two_selection.json").read_text())
    assert [s["rollout_id"] for s in selection["selected"]] == ["a"]


async def test_the_model_is_tried_again_at_every_flush_until_it_succeeds(
    sandbox: SandboxSession,
) -> None:
    seen: list[int] = []

    def counting(request: ModelRequest) -> Any:
        seen.append(1)
        return "nothing"

    broken = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(counting)
    )
    await get_manager(sandbox, PATHS, broken).record(segment("a", "task a"))
    assert (await flush(sandbox, broken)).phase_two == "fallback"
    tried = len(seen)
    assert tried > 0
    assert (await flush(sandbox, broken)).phase_two == "fallback"
    assert len(seen) > tried  # not "skipped": the model was asked again


async def test_an_incomplete_result_stays_in_history_as_the_record(
    sandbox: SandboxSession,
) -> None:
    from sandmem.memory.history import Store

    partial = MemoryGenerateConfig(
        phase_one_model=phase_one_model(),
        phase_two_model=writes("## Tests\n- run pytest -q\n", "Use pytest -q."),
    )
    await get_manager(sandbox, PATHS, partial).record(segment("a", "task a"))
    assert (await flush(sandbox, partial)).phase_two == "fallback"
    store = Store(sandbox, PATHS)
    versions = [await store.read_version(name) for name in await store.version_names()]
    engines = [(v.attribution.engine, v.attribution.note or "") for v in versions]
    assert ("model", "") in engines  # the model's incomplete result, committed and kept
    assert any(e == "extractive" and n.startswith("extractive fallback:") for e, n in engines)


async def test_no_fallback_when_switched_off_or_in_review_mode(sandbox: SandboxSession) -> None:
    base = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(crashes)
    )
    await get_manager(sandbox, PATHS, base).record(segment("a", "task a"))
    off = base.model_copy(update={"phase_two_fallback": False})
    assert (await flush(sandbox, off)).phase_two == "failed"
    summary = sandbox.root / "memories/memory_summary.md"
    assert not summary.exists() or not summary.read_text().strip()
    review = base.model_copy(update={"review": True})
    assert (await flush(sandbox, review)).phase_two == "failed"
    assert not summary.exists() or not summary.read_text().strip()


async def test_no_run_starts_with_an_empty_summary_when_raw_memories_exist(
    sandbox: SandboxSession,
) -> None:
    """Run 1 records a conversation and its consolidation fails; run 2's instructions carry
    the extractive summary."""
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(lambda r: "no")
    )
    first = FunctionModel(lambda r: "ran pytest -q and fixed src/app.py")
    agent = SandboxAgent(
        name="dev", model=first, capabilities=[Memory(generate=config), Filesystem(), Shell()]
    )
    run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
    await Runner.run(agent, "fix the failing test in src/app.py", run_config=run)
    await sandbox.stop()  # the stop flushes: phase one, then the failing phase two
    assert (sandbox.root / "memories/raw_memories").is_dir()

    resumed = await UnixLocalSandboxClient().resume(sandbox.state)
    second = FunctionModel(lambda r: "ok")
    agent2 = SandboxAgent(
        name="dev", model=second, capabilities=[Memory(generate=config), Filesystem(), Shell()]
    )
    async with resumed:
        run = RunConfig(sandbox=SandboxRunConfig(session=resumed))
        await Runner.run(agent2, "next task", run_config=run)
    instructions = second.requests[0].instructions or ""
    assert "<memory_summary>" in instructions
    body = instructions.split("<memory_summary>", 1)[1].split("</memory_summary>", 1)[0]
    assert FALLBACK_NOTE in body and len(body.strip()) > len(FALLBACK_NOTE) + 20


# ------------------------------------------------------------------ the brief is not memory


def copier(request: ModelRequest) -> Any:
    """Copies the bookkeeping lines of its brief into both files (seen with a 1.5B model),
    around a real entry."""
    if tool_outputs(request):
        return "done"
    brief = request.instructions or ""
    copied = [
        line
        for line in brief.splitlines()
        if line.strip().startswith(("- added", "- retained", "- a ", "1. `", "The rule"))
        or "(updated" in line
    ]
    assert copied, "the brief has bookkeeping lines to copy"
    memory = "\n".join(
        ["## Tests", "- run pytest -q", *copied, "Sources: rollout_summaries/a_fix-the-bug.md"]
    )
    summary = "\n".join(["Run pytest -q before committing.", *copied])
    return [
        tool_call("write_file", {"path": "memories/MEMORY.md", "content": memory + "\n"}),
        tool_call("write_file", {"path": "memories/memory_summary.md", "content": summary}),
    ]


async def test_brief_lines_copied_into_memory_are_removed(sandbox: SandboxSession) -> None:
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(copier)
    )
    await get_manager(sandbox, PATHS, config).record(segment("a", "task a"))
    report = await flush(sandbox, config)
    assert report.phase_two == "done", report.phase_two_error
    memory = (sandbox.root / "memories/MEMORY.md").read_text()
    summary = (sandbox.root / "memories/memory_summary.md").read_text()
    assert memory == "## Tests\n- run pytest -q\nSources: rollout_summaries/a_fix-the-bug.md\n"
    assert summary.strip() == "Run pytest -q before committing."
    for text in (memory, summary):
        assert "(updated" not in text and "added (new or changed" not in text


async def test_a_summary_that_is_only_the_brief_falls_back(sandbox: SandboxSession) -> None:
    def only_brief(request: ModelRequest) -> Any:
        if tool_outputs(request):
            return "done"
        lines = [ln for ln in (request.instructions or "").splitlines() if "(updated" in ln]
        memory = "## T\nSources: rollout_summaries/a_fix-the-bug.md\n"
        return [
            tool_call("write_file", {"path": "memories/MEMORY.md", "content": memory}),
            tool_call(
                "write_file", {"path": "memories/memory_summary.md", "content": "\n".join(lines)}
            ),
        ]

    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(only_brief)
    )
    await get_manager(sandbox, PATHS, config).record(segment("a", "task a"))
    report = await flush(sandbox, config)
    assert report.phase_two == "fallback"
    summary = (sandbox.root / "memories/memory_summary.md").read_text()
    assert summary.startswith(FALLBACK_NOTE) and "(updated" not in summary


def test_strip_brief_keeps_content_and_short_lines() -> None:
    lines = brief_lines(
        "Write these files with your tools:\n- added (new or changed conversations):\n"
        "  - r1 (updated 2026-01-01, completed; summary memories/rollout_summaries/r1.md)\nOK\n"
    )
    text = (
        "## Deploy\n"
        "* Added (new or changed conversations):\n"  # another bullet, other case: still a copy
        "- r1 (updated 2026-01-01, completed; summary memories/rollout_summaries/r1.md)\n"
        "OK\n"
        "- write these files with your tools carefully\n"  # not the same line
    )
    clean, removed = strip_brief(text, lines)
    assert removed == 2
    assert clean == "## Deploy\nOK\n- write these files with your tools carefully\n"
