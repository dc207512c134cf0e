"""Review mode: ``MemoryReadConfig(live_update="propose")`` and
``MemoryGenerateConfig(review=True)`` turn memory changes into proposals; ``inbox``,
``approve`` and ``dismiss``; a stale proposal is reported and refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_history import EXTRACT, PATCH, consolidated, kinds, memory_md, open_session, record

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, UserError
from sandmem import memory as api
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig, MemoryReadConfig
from sandmem.memory.read_prompt import memory_read_prompt
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel

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
    memory = Memory(read=PROPOSE, generate=MemoryGenerateConfig())
    assert memory.required_capability_types() == frozenset({Filesystem, Shell})
    with pytest.raises(ValueError):
        MemoryReadConfig(live_update="maybe")  # type: ignore[arg-type]


SUMMARY_PATCH = """*** Begin Patch
*** Update File: memories/memory_summary.md
@@
+- Proposed: deploys need the PELICAN-2 flag.
*** End Patch"""


async def test_the_next_run_reads_a_proposed_summary_only_after_approval(tmp_path: Path) -> None:
    """The summary is what every run's instructions carry: a proposal to change it reaches the
    next run's first request only once approved."""
    await consolidated(tmp_path, ["invoice-fix"])
    async with await open_session(tmp_path) as session:
        await record(session, "deploy-notes", config=None, read=PROPOSE, patch=SUMMARY_PATCH)
    seen: list[str] = []

    def reader(request: ModelRequest) -> str:
        seen.append(request.instructions or "")
        return "ok"

    async def next_run() -> str:
        async with await open_session(tmp_path) as session:
            agent = SandboxAgent(
                name="dev",
                model=FunctionModel(reader),
                capabilities=[Memory(generate=None), Filesystem(), Shell()],
            )
            config = RunConfig(sandbox=SandboxRunConfig(session=session))
            await Runner.run(agent, "what flag do deploys need?", run_config=config)
        return seen[-1]

    instructions = await next_run()
    assert "PELICAN-2" not in instructions and "# Memory summary" in instructions
    [proposal] = await api.inbox(tmp_path)
    assert proposal.files == ["memory_summary.md"]
    await api.approve(tmp_path, proposal.id)
    assert "- Proposed: deploys need the PELICAN-2 flag." in await next_run()


async def test_a_stale_consolidation_proposal_is_regenerated_after_dismissal(
    tmp_path: Path,
) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    await consolidated(tmp_path, ["deploy-notes"], config=REVIEW)
    [stale] = await api.inbox(tmp_path)
    path = tmp_path / "memories" / "MEMORY.md"
    path.write_text(path.read_text() + "\n- a hand note written meanwhile\n")
    [listed] = await api.inbox(tmp_path)
    assert listed.id == stale.id and listed.stale == ["MEMORY.md"]
    with pytest.raises(UserError, match=r"stale: MEMORY\.md changed"):
        await api.approve(tmp_path, stale.id)
    await api.dismiss(tmp_path, stale.id)
    report = await api.generate(tmp_path, config=REVIEW)  # regenerated on the moved-on memory
    assert report.phase_two == "proposed"
    [fresh] = await api.inbox(tmp_path)
    assert fresh.id != stale.id and fresh.stale == []
    version = await api.approve(tmp_path, fresh.id)
    assert version.kind == "consolidation" and version.rollouts_added == ["deploy-notes"]
    assert "a hand note written meanwhile" in path.read_text()  # the edit is folded in, kept
    assert await kinds(tmp_path) == ["consolidation", "hand_edit", "consolidation"]


# ---------------------------------------------------------------- every tool of the run


async def _shell_run(root: Path, *cmds: str, patch: str | None = None) -> None:
    """A review-mode run whose agent runs ``cmds`` in its shell (and ``patch``, if given)."""
    from memory_doubles import scripted_agent
    from test_history import LAYOUT, open_session

    from sandmem.testing import tool_call

    steps = [(lambda r, c=c: [tool_call("exec_command", {"cmd": c})]) for c in cmds]
    if patch is not None:
        steps.append(lambda r: [tool_call("apply_patch", {"patch": patch})])
    steps.append(lambda r: "done")
    memory = Memory(layout=LAYOUT, generate=None, read=PROPOSE)
    agent = SandboxAgent(
        name="dev", model=scripted_agent(*steps), capabilities=[memory, Filesystem(), Shell()]
    )
    async with await open_session(root) as session:
        run_config = RunConfig(sandbox=SandboxRunConfig(session=session))
        await Runner.run(agent, "edit memory", run_config=run_config, conversation_id="shell")


def _reviewed(root: Path) -> dict[str, bytes]:
    """The reviewed files (MEMORY.md, the summary, skills/**), links included by target."""
    memories = root / "memories"
    found = {}
    for path in sorted(memories.rglob("*")):
        name = str(path.relative_to(memories))
        if name in ("MEMORY.md", "memory_summary.md") or name.startswith("skills/"):
            if path.is_symlink():
                found[name] = b"-> " + os.readlink(path).encode()
            elif path.is_file():
                found[name] = path.read_bytes()
    return found


SHELL_EDITS = [
    # (commands, the files the proposal changes, a line its diff holds)
    (["printf -- '- injected by printf\\n' >> memories/MEMORY.md"], ["MEMORY.md"], "+- injected"),
    (["sed -i 's/invoice/INVOICE/g' memories/MEMORY.md"], ["MEMORY.md"], "INVOICE"),
    (["rm memories/memory_summary.md"], ["memory_summary.md"], "-"),
    (
        ["mkdir -p memories/skills/new && printf '# new skill\\n' > memories/skills/new/SKILL.md"],
        ["skills/new/SKILL.md"],
        "+# new skill",
    ),
    (
        [
            "printf '# moved in\\n' > notes.md",
            "mkdir -p memories/skills/m",
            "mv notes.md memories/skills/m/SKILL.md",
        ],
        ["skills/m/SKILL.md"],
        "+# moved in",
    ),
    (
        ["printf 'one\\n' > memories/MEMORY.md", "printf -- '- two\\n' >> memories/MEMORY.md"],
        ["MEMORY.md"],
        "+- two",
    ),
]


@pytest.mark.parametrize(("cmds", "files", "line"), SHELL_EDITS)
async def test_a_shell_edit_in_review_mode_is_a_proposal_and_live_memory_stays(
    tmp_path: Path, cmds: list[str], files: list[str], line: str
) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    summary = tmp_path / "memories/memory_summary.md"
    summary.write_text(summary.read_text() + "\n- a summary line\n")
    await api.generate(tmp_path)  # versions the hand edit: the approved state
    approved = _reviewed(tmp_path)
    versions = await kinds(tmp_path)
    await _shell_run(tmp_path, *cmds)
    assert _reviewed(tmp_path) == approved  # the live files stay as approved
    assert await kinds(tmp_path) == versions  # no version made behind review's back
    [proposal] = await api.inbox(tmp_path)
    assert (proposal.kind, proposal.run, proposal.files) == ("live_edit", "shell", files)
    assert line in proposal.diff
    await api.approve(tmp_path, proposal.id)
    assert _reviewed(tmp_path) != approved


async def test_links_and_special_files_a_run_leaves_are_removed(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    approved = _reviewed(tmp_path)
    (tmp_path / "src").mkdir()
    await _shell_run(
        tmp_path,
        "ln -s ../../src memories/skills/lnk",
        "mkdir -p memories/skills/p && mkfifo memories/skills/p/SKILL.md",
        "ln -sf ../../../src/app.py memories/skills/file.md",
    )
    assert _reviewed(tmp_path) == approved
    assert await api.inbox(tmp_path) == []


async def test_patch_and_shell_edits_of_one_run_are_one_proposal(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    approved = _reviewed(tmp_path)
    await _shell_run(
        tmp_path,
        "mkdir -p memories/skills/s && printf '# s\\n' > memories/skills/s/SKILL.md",
        patch=PATCH,
    )
    assert _reviewed(tmp_path) == approved
    [proposal] = await api.inbox(tmp_path)
    assert proposal.files == ["MEMORY.md", "skills/s/SKILL.md"]
    assert "blue-7" in proposal.diff


async def test_a_run_that_changes_nothing_proposes_nothing(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    approved = _reviewed(tmp_path)
    await _shell_run(tmp_path, "cat memories/MEMORY.md", "ls memories/skills")
    assert _reviewed(tmp_path) == approved and await api.inbox(tmp_path) == []


async def test_a_secret_a_shell_writes_in_review_mode_is_redacted_in_the_proposal(
    tmp_path: Path,
) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    key = "sk-proj-Zq3xV8kT1mN5bR7wY2cL9pD4fG6hJ0sA"
    await _shell_run(tmp_path, f"printf -- '- key {key}\\n' >> memories/MEMORY.md")
    [proposal] = await api.inbox(tmp_path)
    assert key not in proposal.diff
    objects = tmp_path / "memories/.history/objects"
    assert not any(key.encode() in p.read_bytes() for p in objects.iterdir())
    assert key not in memory_md(tmp_path)


async def test_a_memory_file_swapped_for_a_link_is_put_back(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    approved = _reviewed(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src/app.py").write_text("print('app')\n")
    await _shell_run(
        tmp_path,
        "ln -sf ../src/app.py memories/MEMORY.md",
        "rm -f memories/memory_summary.md && mkfifo memories/memory_summary.md",
    )
    assert _reviewed(tmp_path) == approved
    assert not (tmp_path / "memories/MEMORY.md").is_symlink()
    assert (tmp_path / "src/app.py").read_text() == "print('app')\n"
