"""File changes made by other agents' edit tools: Claude Code's ``Edit``, ``Write``,
``MultiEdit`` and ``NotebookEdit``, and any tool of the same kind (a text-editor tool's
``create`` / ``str_replace`` / ``insert``, ``write_file``, ``edit_file``, ``replace``, ...): a
tool whose name says it writes and whose arguments name a file. ``apply_patch`` (sandmem's own
and Codex's) is read from its patch text instead (``_patches``)."""

from __future__ import annotations

import re
from typing import Any

from sandmem.memory.extractive._patches import PatchChange, describe_lines
from sandmem.memory.extractive._shell import describe_content

#: a tool name (an MCP server prefix left out) that says the tool writes files
_WRITER = re.compile(
    r"(?:^|[_.-])(?:edit|multiedit|notebookedit|write|create|replace|insert|str_replace|"
    r"save|overwrite|append|delete|remove|rename|move)(?:$|[_.-])|^(?:edit|write)",
    re.I,
)
_PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file", "target_file")
#: a text-editor tool's commands that only read
_READ_COMMANDS = frozenset({"view", "read", "list", "show", "open"})


def edit_tool_changes(name: str, args: dict[str, Any]) -> list[PatchChange] | None:
    """The change an edit tool made, or ``None`` when ``name`` is not an edit tool or its
    arguments name no file."""
    base = name.rsplit("__", 1)[-1].rsplit(".", 1)[-1]
    path = next((args[k] for k in _PATH_KEYS if isinstance(args.get(k), str) and args[k]), None)
    command = args.get("command")
    if path is None or not _WRITER.search(base):
        if not (path and isinstance(command, str) and base.endswith("editor")):
            return None
    if isinstance(command, str) and command.lower() in _READ_COMMANDS:
        return None
    lowered = f"{base} {command or ''}".lower()
    if "delete" in lowered or "remove" in lowered:
        return [PatchChange("deleted", path)]
    content = args.get("content", args.get("file_text"))
    if isinstance(content, str) and ("write" in lowered or "create" in lowered):
        return [PatchChange("written", path, describe_content(path, content) or "")]
    return [PatchChange("changed", path, _edit_detail(args))]


def _edit_detail(args: dict[str, Any]) -> str:
    """``changed `old` to `new``` from ``old_string``/``new_string`` pairs (one edit, or
    ``MultiEdit``'s list), or a notebook cell's new source."""
    pairs: list[tuple[str, str]] = []
    edits = args.get("edits")
    for edit in edits if isinstance(edits, list) else [args]:
        if not isinstance(edit, dict):
            continue
        old = edit.get("old_string", edit.get("old_str", edit.get("old")))
        new = edit.get("new_string", edit.get("new_str", edit.get("new")))
        if isinstance(old, str) or isinstance(new, str):
            pairs.append((old if isinstance(old, str) else "", new if isinstance(new, str) else ""))
    source = args.get("new_source", args.get("insert_text"))
    if not pairs and isinstance(source, str):
        pairs.append(("", source))
    return describe_lines(pairs)


_STATEFUL_TOOL = re.compile(
    r"(?:^|[_.-])(?:create|update|set|add|delete|remove|deploy|commit|push|send|post|put|"
    r"publish|upload|install|merge|write|save|insert|apply|migrate|restart|release|tag)"
    r"(?:$|[_.-])|^(?:create|update|set|add|delete|deploy|commit|push|send|post|publish|"
    r"upload|install|merge|write|save|insert|apply|migrate|restart|release)",
    re.I,
)


def changes_state(name: str) -> bool:
    """Whether a tool's name says it changes something (``deploy_service``, ``create_issue``,
    ``mcp__db__insert_row``): its result is worth quoting."""
    base = name.rsplit("__", 1)[-1].rsplit(".", 1)[-1]
    return bool(_STATEFUL_TOOL.search(base))
