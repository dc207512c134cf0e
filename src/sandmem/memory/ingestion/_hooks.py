"""What the agents' hooks hand over, as the transcript files to ingest. Pure but for the
Codex lookup of a thread's rollout file.

- Claude Code runs a ``SessionEnd`` hook command with a JSON object on stdin:
  ``{"session_id", "transcript_path", "cwd", "hook_event_name": "SessionEnd", "reason"}``.
- Codex runs its ``notify`` command with one more argument, a JSON object:
  ``{"type": "agent-turn-complete", "thread-id", "turn-id", "cwd", "input-messages",
  "last-assistant-message"}``; the thread's rollout file is
  ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread-id>.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def _object(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"the {what} is not JSON") from None
    if not isinstance(data, dict):
        raise ValueError(f"the {what} is not a JSON object")
    return data


def claude_hook_paths(stdin_text: str) -> list[Path]:
    """The transcript a Claude Code hook names (``transcript_path``)."""
    data = _object(stdin_text, "Claude Code hook input")
    path = data.get("transcript_path")
    if not isinstance(path, str) or not path:
        raise ValueError("the Claude Code hook input has no transcript_path")
    return [Path(path).expanduser().absolute()]  # never read as an option: "-..." is a path


def codex_home() -> Path:
    return Path(os.environ.get("CODEX_HOME") or Path.home() / ".codex")


def codex_notify_paths(argument: str, home: Path | None = None) -> list[Path]:
    """The rollout file of the thread a Codex ``notify`` payload names (the newest one when
    a thread was resumed into several); none for other notification types."""
    data = _object(argument, "Codex notify payload")
    if data.get("type") != "agent-turn-complete":
        return []
    thread = data.get("thread-id")
    if not isinstance(thread, str) or not _SAFE_ID.fullmatch(thread):
        raise ValueError("the Codex notify payload has no usable thread-id")
    sessions = (home or codex_home()) / "sessions"
    found = sorted(sessions.rglob(f"rollout-*{thread}.jsonl"), key=lambda p: p.stat().st_mtime)
    return found[-1:]
