"""The offline ``scripted`` agent of ``sandmem eval``: a deterministic policy, not a model.

It checks the machinery (runs, memory generation, resumes, checks, metrics), not any model's
use of memory. Each step's :class:`StepScript` says what to run; the policy derives where it
is from the request alone (the calls made since the last user message), like a model would:

1. a memory-aware policy, when the memory prompt is in its instructions and the step has a
   ``recall`` text, first greps ``MEMORY.md`` for it (one turn);
2. ``verify`` actions always run (current evidence wins over memory);
3. without the knowledge (no grep hit, no correction yet) it explores, then runs ``naive``
   (or ``actions``); with it, it runs ``actions`` directly;
4. then it answers.

A policy built with ``uses_memory=False`` never looks at memory: in the memory condition it
costs the same as without memory, which is what a test of the metrics needs to see.
"""

from __future__ import annotations

import re
import shlex

from sandmem._items import Item, item_kind, message_text
from sandmem.eval._suite import ScriptAction, StepScript
from sandmem.models import ModelRequest
from sandmem.testing import FunctionModel, text, tool_call

_EXIT = re.compile(r"^Exit code: (-?\d+)", re.MULTILINE)


def _since_last_user(items: list[Item]) -> tuple[str, list[tuple[str, str]]]:
    """The last user message's text and the (tool name, output) of each call after it."""
    users = [index for index, item in enumerate(items) if item.get("role") == "user"]
    start = users[-1] if users else 0
    last_user = message_text(items[start]) if users else ""
    outputs = {
        item.get("call_id"): str(item.get("output", ""))
        for item in items[start:]
        if item_kind(item) == "function_call_output"
    }
    calls = [
        (str(item.get("name")), outputs.get(item.get("call_id"), ""))
        for item in items[start:]
        if item_kind(item) == "function_call"
    ]
    return last_user, calls


def _call(action: ScriptAction) -> Item:
    if action.cmd is not None:
        return tool_call("exec_command", {"cmd": action.cmd})
    return tool_call("apply_patch", {"patch": action.patch})


def _grep_command(recall: str, memories_dir: str) -> str:
    return f"grep -n -i -F {shlex.quote(recall)} {shlex.quote(memories_dir + '/MEMORY.md')}"


def scripted_policy(
    script: StepScript,
    *,
    correction: str | None,
    memories_dir: str,
    uses_memory: bool,
) -> FunctionModel:
    """A model that plays ``script`` for one step (a fresh one per step)."""

    def respond(request: ModelRequest) -> list[Item]:
        last_user, calls = _since_last_user(list(request.input))
        memory_shown = f"`{memories_dir}/MEMORY.md`" in (request.instructions or "")
        plan: list[Item] = []
        knows = correction is not None and last_user.strip() == correction.strip()
        if uses_memory and memory_shown and script.recall and not knows:
            grep = tool_call("exec_command", {"cmd": _grep_command(script.recall, memories_dir)})
            plan.append(grep)
            if calls:
                match = _EXIT.search(calls[0][1])
                knows = match is not None and match.group(1) == "0"
        plan += [_call(action) for action in script.verify]
        if knows:
            plan += [_call(action) for action in script.actions]
        else:
            plan += [_call(action) for action in script.explore]
            chosen = script.naive if script.naive is not None else script.actions
            plan += [_call(action) for action in chosen]
        if len(calls) < len(plan):
            return [plan[len(calls)]]
        return [text(script.answer)]

    name = "scripted (memory-aware)" if uses_memory else "scripted (ignores memory)"
    return FunctionModel(respond, name=name)
