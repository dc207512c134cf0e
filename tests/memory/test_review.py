"""Review mode: ``MemoryReadConfig(live_update="propose")`` and
``MemoryGenerateConfig(review=True)`` turn memory changes into proposals; ``inbox``,
``approve`` and ``dismiss``; a stale proposal is reported and refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_history import EXTRACT, PATCH, consolidated, kinds, memory_md, open_session, record

from sandmem import UserError
from sandmem import memory as api
from sandmem.memory import MemoryGenerateConfig, MemoryReadConfig
from sandmem.memory.read_prompt import memory_read_prompt

PROPOSE = MemoryReadConfig(live_update="propose")
REVIEW = EXTRACT.model_copy(update={"review": True})


async def propose_edit(root: Path, rid: str = "deploy-notes") -> None:
    async with await open_session(root) as session:
        await record(session, rid, config=None, read=PROPOSE, patch=PATCH)


async def test_a_proposed_edit_is_invisible_until_approved(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    before = memory_md(tmp_path)
    await propose_edit(tmp_path)
    assert memory_md(tmp_path) == before  # the next run reads this file: unchanged
    assert await kinds(tmp_path) == ["consolidation"]
    [proposal] = await api.inbox(tmp_path)
    assert (proposal.kind, proposal.run, proposal.base) == ("live_edit", "deploy-notes", 1)
    assert proposal.files == ["MEMORY.md"] and proposal.stale == []
    assert "+- Correction: the staging cluster is called blue-7" in proposal.diff
    version = await api.approve(tmp_path, proposal.id, client="reviewer")
    assert (version.kind, version.proposal, version.client) == (
        "live_edit",
        proposal.id,
        "reviewer",
    )
    assert version.run == "deploy-notes"
    assert "blue-7" in memory_md(tmp_path)
    assert await api.inbox(tmp_path) == []
    assert await kinds(tmp_path) == ["live_edit", "consolidation"]


async def test_dismissal_drops_a_proposal(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    before = memory_md(tmp_path)
    await propose_edit(tmp_path)
    [proposal] = await api.inbox(tmp_path)
    dropped = await api.dismiss(tmp_path, proposal.id)
    assert dropped.id == proposal.id
    assert await api.inbox(tmp_path) == [] and memory_md(tmp_path) == before
    assert await kinds(tmp_path) == ["consolidation"]
    objects = tmp_path / "memories" / ".history" / "objects"
    assert not any(b"blue-7" in p.read_bytes() for p in objects.iterdir())
    with pytest.raises(UserError, match="no pending proposal"):
        await api.approve(tmp_path, proposal.id)


async def test_a_stale_proposal_is_reported_and_refused(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    await propose_edit(tmp_path)
    path = tmp_path / "memories" / "MEMORY.md"
    path.write_text(path.read_text() + "\n- a later hand edit\n")  # memory moved on
    [proposal] = await api.inbox(tmp_path)
    assert proposal.stale == ["MEMORY.md"]
    with pytest.raises(UserError, match="stale"):
        await api.approve(tmp_path, proposal.id)
    assert "blue-7" not in path.read_text()
    await api.dismiss(tmp_path, proposal.id)


async def test_review_consolidation_is_a_proposal_until_approved(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"], config=REVIEW)
    assert memory_md(tmp_path) == "" and await kinds(tmp_path) == []
    assert not (tmp_path / "memories" / "phase_two_selection.json").exists()
    [proposal] = await api.inbox(tmp_path)
    assert proposal.kind == "consolidation" and "MEMORY.md" in proposal.files
    again = await api.generate(tmp_path, config=REVIEW)
    assert again.phase_two == "skipped"  # nothing new: no second proposal
    assert [p.id for p in await api.inbox(tmp_path)] == [proposal.id]
    version = await api.approve(tmp_path, proposal.id)
    assert version.kind == "consolidation" and version.rollouts_added == ["invoice-fix"]
    assert "invoice" in memory_md(tmp_path).lower()
    assert (tmp_path / "memories" / "phase_two_selection.json").exists()
    report = await api.generate(tmp_path, config=REVIEW)
    assert report.phase_two == "skipped" and await api.inbox(tmp_path) == []


async def test_a_dismissed_consolidation_is_regenerated_by_the_next_generate(
    tmp_path: Path,
) -> None:
    await consolidated(tmp_path, ["invoice-fix"], config=REVIEW)
    [first] = await api.inbox(tmp_path)
    await api.dismiss(tmp_path, first.id)
    report = await api.generate(tmp_path, config=REVIEW)
    assert report.phase_two == "proposed"
    [again] = await api.inbox(tmp_path)
    assert again.id != first.id and again.kind == "consolidation"


async def test_a_newer_consolidation_proposal_supersedes_the_older(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"], config=REVIEW)
    [first] = await api.inbox(tmp_path)
    await consolidated(tmp_path, ["deploy-notes"], config=REVIEW)
    [second] = await api.inbox(tmp_path)
    assert second.id != first.id
    version = await api.approve(tmp_path, second.id)
    assert sorted(version.rollouts_added) == ["deploy-notes", "invoice-fix"]


def test_propose_has_its_own_prompt_and_needs_filesystem() -> None:
    text = memory_read_prompt("- a fact", "memories", live_update="propose") or ""
    assert "review" in text and "apply_patch" in text
    from sandmem.capabilities import Filesystem, Shell
    from sandmem.capabilities.memory import Memory

    memory = Memory(read=PROPOSE, generate=MemoryGenerateConfig())
    assert memory.required_capability_types() == frozenset({Filesystem, Shell})
    with pytest.raises(ValueError):
        MemoryReadConfig(live_update="maybe")  # type: ignore[arg-type]
