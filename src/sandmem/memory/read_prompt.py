"""The memory read prompt: what a run (or any client of a layout) is told about memory.

The one place that turns ``memory_summary.md`` into the text placed in an agent's
instructions: the read guidance, the update policy, and the summary cut to
``SUMMARY_MAX_TOKENS`` (head and tail kept). The ``Memory`` capability, the viewer and the
demo all call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from sandmem._prompts import escape_fence, load_prompt, render_prompt
from sandmem._truncate import truncate_head_tail
from sandmem.memory.layout import MemoryPaths, read_text

if TYPE_CHECKING:
    from sandmem.sandboxes._session import SandboxSession

#: the summary is cut to this many tokens (4 bytes a token), head and tail kept
SUMMARY_MAX_TOKENS = 15_000


def memory_read_prompt(
    summary: str, memories_dir: str, *, live_update: bool | Literal["propose"]
) -> str | None:
    """The memory prompt for a run, or ``None`` when the summary is empty."""
    if not summary.strip():
        return None
    policy_name = "memory_read_only"
    if live_update == "propose":
        policy_name = "memory_propose"
    elif live_update:
        policy_name = "memory_live_update"
    policy = render_prompt(load_prompt("sandmem.memory", policy_name), memories_dir=memories_dir)
    return render_prompt(
        load_prompt("sandmem.memory", "memory_read"),
        memories_dir=memories_dir,
        update_policy=policy.strip(),
        summary=escape_fence(
            truncate_head_tail(summary.strip(), SUMMARY_MAX_TOKENS, what="memory summary"),
            "memory_summary",
        ),
    )


async def read_prompt_for(
    session: SandboxSession,
    paths: MemoryPaths,
    *,
    live_update: bool | Literal["propose"],
    display_dir: str | None = None,
) -> str | None:
    """The memory prompt for a layout as it is now: a commit a killed process left half-applied
    is finished first, so the summary read is the committed one. ``display_dir`` is how the
    prompt names the memory directory (default: ``paths.memories_dir``)."""
    from sandmem.memory.journal import try_recover

    await try_recover(session, paths)
    summary = await read_text(session, paths.summary_md) or ""
    shown = display_dir or paths.memories_dir
    return memory_read_prompt(summary, shown, live_update=live_update)
