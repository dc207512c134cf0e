"""Phase two: scoped tools, the consolidation prompt, edits shown as a diff, retry limits."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from memory_doubles import phase_one_model, phase_two_model

from sandmem import SandboxSession, UserError
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory._types import ConsolidationInputs
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation._scoped_tools import scoped_tools
from sandmem.memory.generation.phase_two import consolidation_instructions, edits_block
from sandmem.memory.layout import MemoryPaths
from sandmem.memory.selection import RawMemoryRef
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel

PATHS = MemoryPaths("memories", "sessions")


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        await session.mkdir("memories/raw_memories")
        await session.write("memories/raw_memories/a.md", "raw a")
        await session.write("memories/MEMORY.md", "## Group\nKeywords: invoice\n")
        await session.write("secret.txt", "outside")
        yield session


async def _call(session: SandboxSession, name: str, **args: object) -> object:
    tools = {t.name: t for t in scoped_tools(session, "memories")}
    return await tools[name].on_invoke(json.dumps(args))


async def test_scoped_tools_read_list_search_write(sandbox: SandboxSession) -> None:
    assert await _call(sandbox, "read_file", path="memories/raw_memories/a.md") == "raw a"
    listed = str(await _call(sandbox, "list_files", path="memories"))
    assert listed.splitlines() == ["memories/MEMORY.md", "memories/raw_memories/a.md"]
    hits = str(await _call(sandbox, "search_files", pattern="INVOICE"))
    assert hits == "memories/MEMORY.md:2: Keywords: invoice"
    await _call(sandbox, "write_file", path="memories/skills/run-tests/SKILL.md", content="x")
    assert (sandbox.root / "memories/skills/run-tests/SKILL.md").read_text() == "x"
    patch = (
        "*** Begin Patch\n*** Update File: memories/MEMORY.md\n@@\n-Keywords: invoice\n"
        "+Keywords: invoice, tax\n*** End Patch\n"
    )
    await _call(sandbox, "apply_patch", patch=patch)
    assert "invoice, tax" in (sandbox.root / "memories/MEMORY.md").read_text()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read_file", {"path": "secret.txt"}),
        ("read_file", {"path": "memories/../secret.txt"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("list_files", {"path": "."}),
        ("search_files", {"pattern": "x", "path": "sessions"}),
        ("write_file", {"path": "secret.txt", "content": "x"}),
        ("write_file", {"path": "memories/raw_memories/a.md", "content": "tampered"}),
        ("write_file", {"path": "memories/phase_two_selection.json", "content": "{}"}),
        ("apply_patch", {"patch": "*** Begin Patch\n*** Add File: notes.md\n+x\n*** End Patch\n"}),
    ],
)
async def test_scoped_tools_refuse_outside_or_protected(
    sandbox: SandboxSession, name: str, args: dict[str, object]
) -> None:
    with pytest.raises(UserError):
        await _call(sandbox, name, **args)
    assert (sandbox.root / "secret.txt").read_text() == "outside"
    assert (sandbox.root / "memories/raw_memories/a.md").read_text() == "raw a"
    assert not (sandbox.root / "notes.md").exists()


def _inputs(
    current: str = "", consolidated: str = "", extra: str | None = None
) -> ConsolidationInputs:
    ref = RawMemoryRef(
        "r1", "2026-01-01T00:00:00Z", "sessions/r1.jsonl", "rollout_summaries/r1_x.md", "completed"
    )
    gone = RawMemoryRef(
        "r0", "2025-01-01T00:00:00Z", "sessions/r0.jsonl", "rollout_summaries/r0_y.md", "failed"
    )
    return ConsolidationInputs(
        memories_dir="memories/eng",
        selected=[],
        added=[ref],
        retained=[],
        removed=[gone],
        current_memory_md=current,
        consolidated_memory_md=consolidated,
        memory_md_max_bytes=1000,
        summary_max_bytes=200,
        extra_prompt=extra,
    )


def test_consolidation_prompt_filled_without_residue() -> None:
    text = consolidation_instructions(_inputs(extra="Track customer names."))
    assert not re.search(r"\{[a-z_]+\}", text) and "{{" not in text
    assert "memories/eng/MEMORY.md" in text and "under 1000 bytes" in text
    summary = "summary memories/eng/rollout_summaries/r1_x.md"
    assert f"- r1 (updated 2026-01-01T00:00:00Z, completed; {summary})" in text
    removed = text.split("- removed", 1)[1].split("Write these files", 1)[0]
    assert "r0 (updated" in removed
    assert "retained" in text and "(none)" in text
    assert "## Developer-specific extra guidance\n\nTrack customer names." in text
    assert "edited since the last consolidation" not in text


def test_edits_since_last_consolidation_are_shown_as_diff() -> None:
    before = "## Invoice\n- run pytest\n"
    now = "## Invoice\n- run pytest -q (not plain pytest)\n"
    block = edits_block(_inputs(current=now, consolidated=before))
    assert "-- run pytest\n" in block and "+- run pytest -q (not plain pytest)" in block
    assert "Keep these edits" in block
    assert edits_block(_inputs(current=before, consolidated=before)) == ""
    assert edits_block(_inputs(current=now, consolidated="")) == ""
    assert "+- run pytest -q" in consolidation_instructions(_inputs(now, before))


async def test_failed_after_max_attempts_until_new_segment_or_retry(
    sandbox: SandboxSession,
) -> None:
    calls = {"n": 0}

    def always_fails(request: object) -> str:
        calls["n"] += 1
        raise RuntimeError("still broken")

    config = MemoryGenerateConfig(
        phase_one_model=FunctionModel(always_fails),
        phase_two_model=phase_two_model(),
        max_attempts=2,
    )
    segment = {
        "updated_at": "2026-01-01T00:00:00Z",
        "rollout_id": "x",
        "input": [{"role": "user", "content": "hello"}],
        "generated_items": [],
        "terminal_metadata": {"terminal_state": "completed"},
    }
    await sandbox.mkdir("sessions")
    await sandbox.write("sessions/x.jsonl", json.dumps(segment) + "\n")
    manager = get_manager(sandbox, PATHS, config)
    for expected in ("pending", "failed", "failed"):
        await manager.flush()
        state = json.loads((sandbox.root / "memories/generation_state.json").read_text())
        assert state["rollouts"]["x"]["status"] == expected
    assert calls["n"] == 2, "a failed rollout is not retried without a change"
    await manager.flush(retry_failed=True)
    assert calls["n"] == 3
    await sandbox.append(
        "sessions/x.jsonl", json.dumps({**segment, "updated_at": "2026-01-02T00:00:00Z"}) + "\n"
    )
    report = await manager.flush()
    assert calls["n"] == 4 and report.failed == {"x": "RuntimeError: still broken"}
    state = json.loads((sandbox.root / "memories/generation_state.json").read_text())
    assert state["rollouts"]["x"]["attempts"] == 1 and state["rollouts"]["x"]["segments"] == 2
    good = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=phase_two_model()
    )
    sandbox._memory_managers.clear()
    report = await get_manager(sandbox, PATHS, good).flush()
    assert report.processed == ["x"], report
    assert report.phase_two == "done", report.phase_two_error
