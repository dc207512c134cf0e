"""The memory read prompt: what a run (or any client of a layout) is told about memory.

The one place that turns ``memory_summary.md`` into the text placed in an agent's
instructions: the read guidance, the update policy, and the summary cut to
``SUMMARY_MAX_TOKENS`` (head and tail kept) — or, with several scopes attached (the person's
personal memory, a team's: ``docs/scopes.md``), their labelled summaries sharing that budget
(``scoped_read_prompt``). The ``Memory`` capability, the MCP server, the viewer and the demo
all call it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol

from sandmem._prompts import escape_fence, load_prompt, render_prompt
from sandmem._truncate import truncate_head_tail
from sandmem.memory.layout import MemoryPaths, read_text
from sandmem.memory.scopes import Scope, scoped_summary

if TYPE_CHECKING:
    from sandmem.sandboxes._session import SandboxSession

#: the summary is cut to this many tokens (4 bytes a token), head and tail kept
SUMMARY_MAX_TOKENS = 15_000


def memory_read_prompt(
    summary: str,
    memories_dir: str,
    *,
    live_update: bool | Literal["propose"],
    scopes_policy: str = "",
) -> str | None:
    """The memory prompt for a run, or ``None`` when the summary is empty. ``scopes_policy``
    (``scopes_policy_for``) follows the update policy when other scopes are attached."""
    if not summary.strip():
        return None
    policy_name = "memory_read_only"
    if live_update == "propose":
        policy_name = "memory_propose"
    elif live_update:
        policy_name = "memory_live_update"
    policy = render_prompt(load_prompt("sandmem.memory", policy_name), memories_dir=memories_dir)
    if scopes_policy.strip():
        policy = f"{policy.strip()}\n\n{scopes_policy.strip()}"
    return render_prompt(
        load_prompt("sandmem.memory", "memory_read"),
        memories_dir=memories_dir,
        update_policy=policy.strip(),
        summary=escape_fence(
            truncate_head_tail(summary.strip(), SUMMARY_MAX_TOKENS, what="memory summary"),
            "memory_summary",
        ),
    )


class AttachedScopes(Protocol):
    """The scopes a run attaches (``capabilities._memory_scopes.RunScopes``), as the read
    prompt needs them."""

    @property
    def scopes(self) -> Sequence[Scope]:
        """Every scope attached, the project first (also those with no memory yet)."""
        ...

    @property
    def readable(self) -> bool:
        """Whether the agent has the tools to search and read the other scopes."""
        ...

    async def sections(self, project_summary: str) -> Sequence[tuple[Scope, str]]:
        """Each scope with its summary, the project first."""
        ...


def scoped_read_prompt(
    sections: Sequence[tuple[Scope, str]],
    memories_dir: str,
    *,
    live_update: bool | Literal["propose"],
    attached: Sequence[Scope] | None = None,
    readable: bool = True,
) -> str | None:
    """The memory prompt of a run with several scopes attached (``docs/scopes.md``): one
    labelled section per scope with a summary, the ``SUMMARY_MAX_TOKENS`` budget shared by
    ``scopes.scoped_summary`` (the project first, and winning where scopes disagree), and
    where each kind of memory is read and written (``scopes_policy_for``; ``attached``: every
    scope, also those with no summary yet, default the sections'). When the project's is the
    only summary, it is given as for one layout (there is nothing to label or to disagree
    with). ``None`` when every summary is empty."""
    kept = [(scope, text) for scope, text in sections if text.strip()]
    if len(kept) == 1 and kept[0][0].kind == "project":
        summary = kept[0][1]
    else:
        summary = scoped_summary(kept, SUMMARY_MAX_TOKENS)
    scopes = [scope for scope, _ in sections] if attached is None else attached
    policy = scopes_policy_for(scopes, memories_dir, live_update, readable=readable)
    return memory_read_prompt(summary, memories_dir, live_update=live_update, scopes_policy=policy)


def scopes_policy_for(
    scopes: Sequence[Scope],
    memories_dir: str,
    live_update: bool | Literal["propose"],
    *,
    readable: bool = True,
) -> str:
    """How a run reaches the scopes attached besides its workspace's layout (``""`` when
    there are none): they are named; with ``readable`` (one has memory), searched and read
    with ``memory_scope_search`` and ``memory_scope_read``; with live updates, a preference
    of the person goes to ``personal`` and a fact about the code to the project, through
    ``memory_scope_update``; a read-only scope is never written."""
    others = [s for s in scopes if s.kind != "project"]
    if not others:
        return ""
    attached = ", ".join(f"`{s.name}` ({s.mode})" for s in others)
    text = render_prompt(load_prompt("sandmem.memory", "run_scopes"), attached=attached).strip()
    if readable:
        text += " " + load_prompt("sandmem.memory", "run_scopes_read").strip()
    writable = [s.name for s in others if s.writable]
    if live_update and writable:
        rule = render_prompt(
            load_prompt("sandmem.memory", "run_scopes_write"),
            memories_dir=memories_dir,
            writable=", ".join(f"`{name}`" for name in writable),
        )
        text += "\n\n" + rule.rstrip()
    return text


async def read_prompt_for(
    session: SandboxSession,
    paths: MemoryPaths,
    *,
    live_update: bool | Literal["propose"],
    display_dir: str | None = None,
    scopes: AttachedScopes | None = None,
) -> str | None:
    """The memory prompt for a layout as it is now: a commit a killed process left half-applied
    is finished first, so the summary read is the committed one. ``display_dir`` is how the
    prompt names the memory directory (default: ``paths.memories_dir``). ``scopes`` turns
    the layout's summary into the attached scopes' (``scoped_read_prompt``)."""
    from sandmem.memory.journal import try_recover

    await try_recover(session, paths)
    summary = await read_text(session, paths.summary_md) or ""
    shown = display_dir or paths.memories_dir
    if scopes is not None:
        return scoped_read_prompt(
            await scopes.sections(summary),
            shown,
            live_update=live_update,
            attached=scopes.scopes,
            readable=scopes.readable,
        )
    return memory_read_prompt(summary, shown, live_update=live_update)
