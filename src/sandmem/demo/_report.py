"""What the demo prints: tool steps of a run, a directory tree, file excerpts."""

from __future__ import annotations

import json
import re
import textwrap
from typing import TextIO

from sandmem._items import Item, item_kind
from sandmem._log_lines import human_size
from sandmem.memory import _files
from sandmem.sandboxes import SandboxSession

_MAX_ARG = 90


def _one_line(text: str, limit: int = _MAX_ARG) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _describe_call(item: Item) -> str:
    name = str(item.get("name"))
    try:
        args = json.loads(str(item.get("arguments") or "{}"))
    except ValueError:
        args = {}
    if not isinstance(args, dict):
        args = {}
    if name == "exec_command":
        return f"exec_command  $ {_one_line(str(args.get('cmd', '')))}"
    if name == "apply_patch":
        patch = str(args.get("patch", ""))
        files = [line.split(":", 1)[1].strip() for line in patch.splitlines() if "File:" in line]
        return f"apply_patch   {', '.join(files) or '(no files)'}"
    return f"{name}  {_one_line(json.dumps(args))}"


def _describe_output(output: object) -> str:
    text = output if isinstance(output, str) else json.dumps(output)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "(no output)"
    if lines[0].startswith("Exit code:"):
        body = [ln for ln in lines[1:] if not ln.startswith(("Wall time:", "Output:"))]
        tail = _one_line(body[-1], 70) if body else "(no output)"
        return f"exit {lines[0].removeprefix('Exit code: ')} · {tail}"
    if lines[0].startswith("Patch applied"):
        return "patched " + ", ".join(lines[1:])
    return _one_line(lines[0], 80)


def print_steps(items: list[Item], out: TextIO) -> None:
    """One line per tool call of a run, with a short view of its output."""
    outputs = {
        item.get("call_id"): item.get("output")
        for item in items
        if item_kind(item) == "function_call_output"
    }
    for item in items:
        if item_kind(item) == "function_call":
            result = _describe_output(outputs.get(item.get("call_id"), ""))
            out.write(f"    → {_describe_call(item)}\n      {result}\n")


def wrap(text: str, width: int = 92) -> str:
    """Wrap each long line of ``text`` at spaces, never inside a `code span`."""
    protected = re.sub(r"`[^`\n]*`", lambda m: m.group(0).replace(" ", "\x00"), text)
    lines = [
        textwrap.fill(line, width=width, break_long_words=False, break_on_hyphens=False)
        if len(line) > width
        else line
        for line in protected.splitlines()
    ]
    return "\n".join(lines).replace("\x00", " ")


def indent(text: str, prefix: str = "    ") -> str:
    return "".join(f"{prefix}{line}\n" for line in text.rstrip("\n").splitlines())


async def tree_lines(session: SandboxSession, path: str) -> list[str]:
    """``path`` and everything below it as an indented tree with file sizes (hidden entries,
    such as lock files, are left out)."""
    lines = [f"{path}/"]

    async def walk(directory: str, prefix: str) -> None:
        names = [n for n in await session.listdir(directory) if not n.startswith(".")]
        for index, name in enumerate(names):
            last = index == len(names) - 1
            child = f"{directory}/{name}"
            branch = "└── " if last else "├── "
            if await session.is_dir(child):
                lines.append(f"{prefix}{branch}{name}/")
                await walk(child, prefix + ("    " if last else "│   "))
            else:
                size = await _files.size(session, child)
                lines.append(f"{prefix}{branch}{name}  ({human_size(size)})")

    if await session.exists(path):
        await walk(path, "")
    else:
        lines.append("(missing)")
    return lines
