"""``--model scripted`` for ``run`` and ``chat``: an offline, deterministic agent (no model,
no server). Like a model given sandmem's memory prompt, it first searches ``MEMORY.md`` with
a few keywords of the task (when the run shows it memory), then lists the workspace, and
answers with what it found. It shows the command line, the live view and memory being read
end to end; it understands nothing, so its runs are not recorded (``run`` and ``chat`` turn
recording off for it): its turns would only put junk into memory."""

from __future__ import annotations

import json
import re
from typing import Any

from sandmem._items import item_kind
from sandmem.models._base import ModelRequest
from sandmem.testing import FunctionModel, tool_call

LIST_COMMAND = "ls -A"
#: the memory prompt names the memory file as `<memories_dir>/MEMORY.md`
_MEMORY_MD = re.compile(r"`([\w./-]+)/MEMORY\.md`")
_WORD = re.compile(r"[a-z0-9]{3,}")
_COMMON = frozenset(
    "the and for you did are was can not but all any how why who its our has had "
    "what which where when does with from that this have about your there their them then "
    "into last time were been will would could should make made please tell show".split()
)
#: keywords of the task searched for in MEMORY.md, at most
MAX_KEYWORDS = 6


def _last_user(request: ModelRequest) -> tuple[int, str]:
    for index in range(len(request.input) - 1, -1, -1):
        item = request.input[index]
        if item_kind(item) == "message" and item.get("role") == "user":
            content = item.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            return index, text
    return 0, ""


def keywords(task: str) -> list[str]:
    """Up to ``MAX_KEYWORDS`` distinct words of the task worth searching for (letters and
    digits only, so they are safe in a shell command)."""
    found: list[str] = []
    for word in _WORD.findall(task.lower()):
        if word not in _COMMON and word not in found:
            found.append(word)
    return found[:MAX_KEYWORDS]


def _outputs(request: ModelRequest, start: int) -> dict[str, str]:
    """Each command run for the current task, with its output."""
    commands = {
        item.get("call_id"): _command(item.get("arguments"))
        for item in request.input[start:]
        if item_kind(item) == "function_call"
    }
    found = {}
    for item in request.input[start:]:
        if item_kind(item) == "function_call_output":
            _, _, body = str(item.get("output", "")).partition("\nOutput:\n")
            found[commands.get(item.get("call_id"), "")] = body
    return found


def _command(arguments: Any) -> str:
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        return ""
    return str(args.get("cmd", "")) if isinstance(args, dict) else ""


def _search(memories_dir: str, words: list[str]) -> str:
    return f"grep -n -i -E '{'|'.join(words)}' {memories_dir}/MEMORY.md"


def _memory_line(memories_dir: str | None, words: list[str], body: str | None) -> str:
    if memories_dir is None:
        return (
            "Memory: none shown to this run (no memory in this workspace yet, or --no-memory-read)."
        )
    if not words:
        return f"Memory: the task has no keyword to search {memories_dir}/MEMORY.md for."
    hits = [line for line in (body or "").splitlines() if line.strip()]
    if not hits:
        return f"Memory: nothing in {memories_dir}/MEMORY.md matches {'|'.join(words)}."
    shown = "\n".join(f"  {line[:200]}" for line in hits[:3])
    more = f"\n  ... and {len(hits) - 3} more" if len(hits) > 3 else ""
    return f"Memory: {len(hits)} line(s) of {memories_dir}/MEMORY.md match:\n{shown}{more}"


def _reply(request: ModelRequest) -> Any:
    start, asked = _last_user(request)
    found = _MEMORY_MD.search(request.instructions or "")
    memories_dir = found.group(1) if found else None
    words = keywords(asked)
    ran = _outputs(request, start)
    search = _search(memories_dir, words) if memories_dir and words else None
    if search is not None and search not in ran:
        return [tool_call("exec_command", {"cmd": search})]
    if LIST_COMMAND not in ran:
        return [tool_call("exec_command", {"cmd": LIST_COMMAND})]
    listing = ran[LIST_COMMAND].split()
    shown = ", ".join(listing[:12]) + (", ..." if len(listing) > 12 else "")
    return (
        f"(scripted offline agent, not a model) You asked: {' '.join(asked.split())[:200]}\n"
        f"{_memory_line(memories_dir, words, ran.get(search) if search else None)}\n"
        f"The workspace holds {len(listing)} entries: {shown or 'nothing'}.\n"
        "This agent only searches memory and lists the workspace, and its runs are not "
        "recorded; pass --model M for a real model."
    )


def scripted_model() -> FunctionModel:
    """A new offline agent model (see the module docstring)."""
    return FunctionModel(_reply, name="scripted")
