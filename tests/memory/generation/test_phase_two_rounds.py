"""Phase two in as few round trips as the work allows: the brief carries the files when they
fit BRIEF_FILES_MAX_BYTES, one turn writes both files, and the run ends once they are written
and verified (no final-answer turn); rollout summaries are not read for the agent."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from memory_doubles import phase_one_model

from sandmem import SandboxSession
from sandmem.memory import MemoryGenerateConfig
from sandmem.memory._types import ConsolidationInputs
from sandmem.memory.generation._attach import get_manager
from sandmem.memory.generation.phase_two import BRIEF_FILES_MAX_BYTES, inputs_block
from sandmem.memory.layout import MemoryPaths
from sandmem.models import ModelRequest
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call, tool_outputs

PATHS = MemoryPaths("memories", "sessions")


def _segment(rid: str) -> str:
    return json.dumps(
        {
            "updated_at": "2026-05-01T10:00:00+00:00",
            "rollout_id": rid,
            "input": [{"role": "user", "content": f"fix bug {rid}"}],
            "generated_items": [{"role": "assistant", "content": "fixed"}],
            "terminal_metadata": {"terminal_state": "completed"},
        }
    )


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[SandboxSession]:
    client = UnixLocalSandboxClient()
    session = await client.create(manifest=Manifest(root=tmp_path / "ws"))
    await session.start()
    yield session
    await client.delete(session)


def _inputs(raw: str) -> ConsolidationInputs:
    return ConsolidationInputs(
        memories_dir="memories",
        selected=[],
        added=[],
        retained=[],
        removed=[],
        current_memory_md="## Old group\n",
        consolidated_memory_md="",
        memory_md_max_bytes=1000,
        summary_max_bytes=200,
        current_summary_md="",
        raw_memories_md=raw,
    )


def test_the_brief_carries_the_files_when_they_fit_and_points_to_them_otherwise() -> None:
    small = inputs_block(_inputs("# Raw memories\n- learned X\n"))
    assert "- learned X" in small and "## Old group" in small and "(empty)" in small
    assert "you need not read them" in small
    big = inputs_block(_inputs("x" * (BRIEF_FILES_MAX_BYTES + 1)))
    assert "xxxx" not in big and "Read it first" in big and "memories/raw_memories.md" in big


async def test_one_request_writes_both_files_and_ends_the_consolidation(
    sandbox: SandboxSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[ModelRequest] = []

    def consolidator(request: ModelRequest) -> Any:
        seen.append(request)
        assert not tool_outputs(request), "no second turn: the run ends after the writes"
        brief = request.instructions or ""
        summaries = re.findall(r"summary memories/(rollout_summaries/\S+)\)", brief)
        assert "fix bug r1" in brief or "The user asked" in brief, "raw memories in the brief"
        memory = "## Bugs\n" + "".join(f"- fixed\n  Sources: {s}\n" for s in summaries)
        files = [
            {"path": "memories/MEMORY.md", "content": memory},
            {"path": "memories/memory_summary.md", "content": "Bugs get fixed."},
        ]
        return [tool_call("write_files", {"files": files})]

    for rid in ("r1", "r2"):
        await sandbox.write(PATHS.rollout_file(rid), _segment(rid) + "\n")
    config = MemoryGenerateConfig(
        phase_one_model=phase_one_model(), phase_two_model=FunctionModel(consolidator)
    )
    reads: Counter[str] = Counter()
    read_many = sandbox.read_many

    async def counting(paths: Sequence[str]) -> dict[str, bytes | None]:
        reads.update(paths)
        return await read_many(paths)

    monkeypatch.setattr(sandbox, "read_many", counting)
    report = await get_manager(sandbox, PATHS, config).flush()
    assert report.phase_two == "done", report.phase_two_error
    assert report.phase_two_usage.requests == len(seen) == 1
    assert "rollout_summaries/r1_" in (sandbox.root / "memories/MEMORY.md").read_text()
    assert not [p for p in reads if "rollout_summaries/" in p], "summaries nothing uses"
