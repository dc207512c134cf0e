"""Issue 14 (9): the extractive engine writes no duplicate bullets, names every task of a
group in its heading, and cites every selected conversation (so it always verifies)."""

from __future__ import annotations

from sandmem.memory._types import ConsolidationInputs, SelectedMemory
from sandmem.memory.extractive import consolidate
from sandmem.memory.selection import RawMemoryRef
from sandmem.memory.verify import verify


def memory(rid: str, day: int, raw: str) -> SelectedMemory:
    ref = RawMemoryRef(
        rid,
        f"2026-01-0{day}T00:00:00Z",
        f"sessions/{rid}.jsonl",
        f"rollout_summaries/{rid}_x.md",
        "completed",
    )
    return SelectedMemory(ref, raw, "")


FIX = memory(
    "fix", 1, "- Task: Fix the invoice total in app.py\n- Works: `pytest -q`\n- Outcome: fixed\n"
)
RENAME = memory(
    "rename", 2, "- Task: Rename the CLI flag in app.py\n- Works: `pytest -q`\n- Outcome: renamed\n"
)
PREFS = memory("prefs", 3, "- Works: `pytest -q`\n- The user prefers short answers\n")
EMPTY = memory("empty", 4, "\n")


def run(selected: list[SelectedMemory], budget: int = 96_000) -> str:
    refs = [m.ref for m in selected]
    return consolidate(
        ConsolidationInputs("memories", selected, refs, [], [], "", "", budget, 24_000)
    ).memory_md


def test_no_bullet_is_written_twice() -> None:
    text = run([FIX, RENAME, PREFS])
    bullets = [
        line.rsplit(" (rollout", 1)[0] for line in text.splitlines() if line.startswith("- ")
    ]
    learnings = [b for b in bullets if not b.startswith("- rollout_summaries/")]
    assert len(learnings) == len(set(learnings))
    assert "- Works: `pytest -q` (rollouts prefs, rename, fix)" in text


def test_a_second_task_in_a_group_is_named_in_its_heading() -> None:
    headings = [line for line in run([FIX, RENAME]).splitlines() if line.startswith("## ")]
    assert headings == ["## Fix the invoice total in app.py / Rename the CLI flag in app.py"]


def test_every_selected_conversation_is_cited() -> None:
    selected = [FIX, RENAME, PREFS, EMPTY]
    for budget in (96_000, 900):
        text = run(selected, budget)
        assert verify(text, [m.ref for m in selected], []).ok, text
