"""``MemoryReadConfig(live_update=True)``: a run's end versions its own edits (what its
``apply_patch`` changed) as the run's ``live_edit`` version, and a change another writer made to
other memory files meanwhile — an editor, a script writing the files directly — as a
``hand_edit`` version of its own, first: each concurrent edit is its own attributed version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from memory_doubles import scripted_agent
from test_history import LAYOUT, PATCH, consolidated, memory_md, open_session

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig, function_tool
from sandmem import memory as api
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryReadConfig
from sandmem.testing import tool_call


async def _run(root: Path, *calls: tuple[str, dict[str, Any]], tools: list[Any]) -> None:
    steps = [(lambda r, c=c: [tool_call(c[0], c[1])]) for c in calls]
    steps.append(lambda r: "done")
    memory = Memory(layout=LAYOUT, generate=None, read=MemoryReadConfig(live_update=True))
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(*steps),
        capabilities=[memory, Filesystem(), Shell()],
        tools=tools,
    )
    async with await open_session(root) as session:
        config = RunConfig(sandbox=SandboxRunConfig(session=session))
        await Runner.run(agent, "fix memory", run_config=config, conversation_id="live")


def _editor(root: Path, name: str, line: str) -> Any:
    @function_tool
    async def editor() -> str:
        """Someone edits a memory file in an editor meanwhile."""
        path = root / "memories" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((path.read_text() if path.exists() else "") + line)
        return "ok"

    return editor


async def _versions(root: Path) -> list[tuple[str, str | None, list[str]]]:
    return [(v.kind, v.run, v.changed) for v in await api.log(root)]


EDITS_ELSEWHERE = [
    # (the file an editor changes meanwhile, its line, whether it comes before the patch)
    ("memory_summary.md", "- an editor's line\n", False),
    ("skills/notes/SKILL.md", "# notes\n", True),
    ("skills/notes/SKILL.md", "# notes\n", False),
    ("memory_summary.md", "- an editor's line\n", True),
]


@pytest.mark.parametrize(("name", "line", "first"), EDITS_ELSEWHERE)
async def test_an_edit_made_elsewhere_during_the_run_is_its_own_version(
    tmp_path: Path, name: str, line: str, first: bool
) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    before = await _versions(tmp_path)
    calls = [("apply_patch", {"patch": PATCH}), ("editor", {})]
    await _run(tmp_path, *(calls[::-1] if first else calls), tools=[_editor(tmp_path, name, line)])
    found = await _versions(tmp_path)
    assert found[: len(found) - len(before)] == [
        ("live_edit", "live", ["MEMORY.md"]),
        ("hand_edit", None, [name]),
    ]
    assert "blue-7" in memory_md(tmp_path)
    assert line in (tmp_path / "memories" / name).read_text()


async def test_a_run_without_a_patch_versions_what_changed_as_its_own(tmp_path: Path) -> None:
    """With no ``apply_patch`` of its own, nothing tells the run's shell from an editor: the
    change is the run's version, as before."""
    await consolidated(tmp_path, ["invoice-fix"])
    before = await _versions(tmp_path)
    editor = _editor(tmp_path, "MEMORY.md", "- a line\n")
    await _run(tmp_path, ("editor", {}), tools=[editor])
    found = await _versions(tmp_path)
    assert found[: len(found) - len(before)] == [("live_edit", "live", ["MEMORY.md"])]


async def test_a_run_whose_patch_changes_nothing_else_makes_one_version(tmp_path: Path) -> None:
    await consolidated(tmp_path, ["invoice-fix"])
    before = await _versions(tmp_path)
    await _run(tmp_path, ("apply_patch", {"patch": PATCH}), tools=[])
    found = await _versions(tmp_path)
    assert found[: len(found) - len(before)] == [("live_edit", "live", ["MEMORY.md"])]
