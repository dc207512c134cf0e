"""SPEC §3.3: the memory read prompt — injection, truncation, variants, configured directory."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from memory_doubles import scripted_agent

from sandmem import (
    Filesystem,
    Manifest,
    Memory,
    MemoryLayoutConfig,
    MemoryReadConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem._truncate import estimate_tokens
from sandmem.capabilities.memory import SUMMARY_MAX_TOKENS, memory_read_prompt
from sandmem.memory.read_prompt import scoped_read_prompt, scopes_policy_for
from sandmem.memory.scopes import Scope

PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


def test_empty_or_blank_summary_injects_nothing() -> None:
    assert memory_read_prompt("", "memories", live_update=True) is None
    assert memory_read_prompt(" \n\t", "memories", live_update=False) is None


@pytest.mark.parametrize("live_update", [True, False])
def test_prompt_is_filled_and_names_the_configured_dir(live_update: bool) -> None:
    prompt = memory_read_prompt("- prefers pytest -q", "memories/eng", live_update=live_update)
    assert prompt is not None
    assert not PLACEHOLDER.search(prompt) and "{{" not in prompt
    assert "<memory_summary>\n- prefers pytest -q\n</memory_summary>" in prompt
    assert "memories/eng/MEMORY.md" in prompt
    assert "memories/eng/rollout_summaries/" in prompt
    assert "do not open `memories/eng/memory_summary.md` again" in prompt
    assert "`memories/MEMORY.md`" not in prompt
    assert "current evidence" in prompt or "workspace now wins" in prompt


def test_live_update_and_read_only_variants_differ() -> None:
    live = memory_read_prompt("x", "memories", live_update=True) or ""
    frozen = memory_read_prompt("x", "memories", live_update=False) or ""
    assert "edit `memories/MEMORY.md` in this same run" in live
    assert "before your final answer" in live
    assert "read-only" in frozen and "never create, edit or delete" in frozen
    assert "in this same run" not in frozen


def test_long_summary_is_cut_head_and_tail_with_marker() -> None:
    head, tail = "HEAD-MARK " * 10, " TAIL-MARK" * 10
    summary = head + "m" * (SUMMARY_MAX_TOKENS * 4 * 3) + tail
    prompt = memory_read_prompt(summary, "memories", live_update=True) or ""
    inner = prompt.split("<memory_summary>\n", 1)[1].split("\n</memory_summary>", 1)[0]
    assert len(inner.encode()) <= SUMMARY_MAX_TOKENS * 4
    assert inner.startswith("HEAD-MARK") and inner.endswith("TAIL-MARK")
    assert "memory summary truncated" in inner and "omitted" in inner


async def test_summary_read_once_per_run_not_per_turn(tmp_path: Path) -> None:
    from sandmem.testing import tool_call

    model = scripted_agent(
        lambda r: [tool_call("exec_command", {"cmd": "echo changed > memories/memory_summary.md"})],
        lambda r: "done",
    )
    agent = SandboxAgent(
        name="reader",
        model=model,
        capabilities=[
            Memory(layout=MemoryLayoutConfig(), read=MemoryReadConfig(), generate=None),
            Filesystem(),
            Shell(),
        ],
    )
    sandbox = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with sandbox:
        await sandbox.write("memories/memory_summary.md", "original summary")
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(agent, "go", run_config=run)
    first, second = model.requests
    assert "original summary" in (first.instructions or "")
    assert first.instructions == second.instructions
    assert not (sandbox.root / "sessions").exists(), "read-only memory records nothing"


def _scope(
    name: str, kind: Literal["project", "personal", "named"], writable: bool = True
) -> Scope:
    return Scope(name, kind, Path(f"/{name}"), writable)


def test_the_scoped_prompt_names_the_other_scopes_and_the_write_rule() -> None:
    project, mine = _scope("project", "project"), _scope("personal", "personal")
    team = _scope("team", "named", writable=False)
    assert scopes_policy_for([project], "memories", True) == ""
    full = scopes_policy_for([project, mine, team], "mem", True)
    assert "`personal` (read-write), `team` (read-only)" in full
    assert 'scope="personal"' in full and "`mem/MEMORY.md`" in full
    assert not PLACEHOLDER.search(full)
    # no write rule without live updates, nor when every other scope is read-only
    for scopes, live in (([project, mine, team], False), ([project, team], True)):
        text = scopes_policy_for(scopes, "mem", live)
        assert "memory_scope_read" in text and "memory_scope_update" not in text
    # the project's summary alone reads as for one layout; another scope's is labelled
    alone = scoped_read_prompt([(project, "P1"), (mine, " ")], "m", live_update=True) or ""
    assert "<memory_summary>\nP1\n</memory_summary>" in alone and "`personal`" in alone
    other = scoped_read_prompt([(project, ""), (mine, "P2")], "m", live_update=True) or ""
    assert "### [personal] personal memory" in other and "### [project]" not in other
    assert scoped_read_prompt([(project, ""), (mine, "")], "m", live_update=True) is None


@settings(max_examples=25, deadline=None)
@example([40_000], "x")
@example([30_000, 30_000, 30_000, 30_000], "</memory_summary>")
@example([0, 30_000], "é")
@given(
    st.lists(st.integers(min_value=0, max_value=30_000), min_size=1, max_size=4),
    st.sampled_from(["x", "é", "</memory_summary>"]),
)
def test_the_scoped_summary_stays_within_the_budget(sizes: list[int], unit: str) -> None:
    """However long the scopes' summaries (multi-byte text, fence look-alikes that the escape
    lengthens), the labelled summary stays within SUMMARY_MAX_TOKENS, so the prompt never cuts
    it again, and every non-empty scope keeps its section."""
    kinds: list[Literal["project", "personal", "named"]] = ["project", "personal", "named", "named"]
    scopes = [_scope(f"s{i}", kinds[i]) for i in range(len(sizes))]
    sections = [
        (scope, unit * (size * 4 // len(unit.encode())))
        for scope, size in zip(scopes, sizes, strict=True)
    ]
    prompt = scoped_read_prompt(sections, "memories", live_update=True)
    kept = [scope for scope, text in sections if text.strip()]
    if not kept:
        assert prompt is None
        return
    assert prompt is not None
    block = prompt.split("<memory_summary>\n", 1)[1].rsplit("\n</memory_summary>", 1)[0]
    if kept == scopes[:1] and kept[0].kind == "project":
        assert "### [" not in block  # the project's alone: as for one layout
        return
    assert estimate_tokens(block) <= SUMMARY_MAX_TOKENS
    assert "[... memory summary truncated" not in block  # never cut again as a whole
    assert all(f"### [{scope.name}]" in block for scope in kept)
