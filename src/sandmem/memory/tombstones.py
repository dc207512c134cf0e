"""What ``forget`` leaves behind so a forgotten conversation stays forgotten.

``forget`` deletes a conversation's files; the transcript it came from (a Codex or Claude Code
session file, an agents SQLite session) usually still exists, and the next ``ingest`` (a hook,
``--watch``) would record it again. So ``forget`` also notes the conversation in
``<sessions_dir>/.forgotten.json``; ingest records nothing for a noted conversation, and
``restore`` / ``approve`` warn when the version they bring back holds one. ``forget --undo``
(``remove``) takes the note away, after which the conversation can be ingested anew.

The file is read as hostile: over ``MAX_BYTES``, not JSON, or not the expected shape is a
``TombstonesUnreadable`` (callers refuse to ingest rather than bring back what may have been
forgotten); entries with an invalid id are ignored.

A note whose id holds a secret (``redact-history``'s pattern) is *sealed*: kept under
``sha256-<hex of the id>`` instead of the id, so the file no longer holds it and the id is
still recognised (``find``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from sandmem._errors import UserError
from sandmem.memory import _files
from sandmem.memory._json import loads_bounded
from sandmem.memory.layout import MemoryPaths, read_text
from sandmem.memory.rollouts import utc_now, validate_rollout_id
from sandmem.sandboxes import SandboxSession

FORGOTTEN_JSON = ".forgotten.json"
SEALED_PREFIX = "sha256-"
#: a note is ~80 bytes: room for tens of thousands of forgotten conversations
MAX_BYTES = 4 * 1024 * 1024


class TombstonesUnreadable(UserError):
    """``.forgotten.json`` exists but cannot be trusted; nothing is ingested until it is
    fixed (or deleted, which brings back every forgotten conversation's ingest)."""


@dataclass(frozen=True)
class Tombstone:
    rollout_id: str
    forgotten_at: str


def tombstones_path(paths: MemoryPaths) -> str:
    return f"{paths.sessions_dir}/{FORGOTTEN_JSON}"


async def load(session: SandboxSession, paths: MemoryPaths) -> dict[str, Tombstone]:
    """The noted conversations by rollout id (empty when there is no file)."""
    where = tombstones_path(paths)
    text = await read_text(session, where)
    if text is None or not text.strip():
        return {}
    if len(text) > MAX_BYTES:
        raise TombstonesUnreadable(f"{where} is larger than {MAX_BYTES} bytes")
    try:
        data = loads_bounded(text)
    except ValueError as exc:
        raise TombstonesUnreadable(f"{where} is not valid JSON ({exc})") from None
    entries = data.get("forgotten") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise TombstonesUnreadable(f'{where} has no "forgotten" object')
    found = {}
    for rid, entry in entries.items():
        try:
            rid = validate_rollout_id(rid)
        except ValueError:
            continue
        at = entry.get("forgotten_at") if isinstance(entry, dict) else None
        found[rid] = Tombstone(rid, at if isinstance(at, str) else "")
    return found


async def _save(session: SandboxSession, paths: MemoryPaths, found: dict[str, Tombstone]) -> None:
    data = {
        "forgotten": {
            rid: {"forgotten_at": stone.forgotten_at} for rid, stone in sorted(found.items())
        }
    }
    await _files.write(session, tombstones_path(paths), json.dumps(data, indent=1) + "\n")


def sealed(rollout_id: str) -> str:
    """The key a note of ``rollout_id`` is kept under once sealed."""
    return SEALED_PREFIX + hashlib.sha256(rollout_id.encode("utf-8")).hexdigest()


def find(found: dict[str, Tombstone], rollout_id: str) -> Tombstone | None:
    """The note of ``rollout_id`` in ``found`` (``load``'s result), sealed or not."""
    return found.get(rollout_id) or found.get(sealed(rollout_id))


async def seal(
    session: SandboxSession, paths: MemoryPaths, holds_secret: Callable[[str], bool]
) -> int:
    """Seal every note whose id ``holds_secret``; returns how many (caller holds the
    sessions lock)."""
    found = await load(session, paths)
    keys = [rid for rid in found if not rid.startswith(SEALED_PREFIX) and holds_secret(rid)]
    for rid in keys:
        stone = found.pop(rid)
        found[sealed(rid)] = Tombstone(sealed(rid), stone.forgotten_at)
    if keys:
        await _save(session, paths, found)
    return len(keys)


async def add(session: SandboxSession, paths: MemoryPaths, rollout_id: str) -> None:
    """Note ``rollout_id`` as forgotten (caller holds the sessions lock)."""
    found = await load(session, paths)
    found[rollout_id] = Tombstone(rollout_id, utc_now())
    await _save(session, paths, found)


async def remove(session: SandboxSession, paths: MemoryPaths, rollout_id: str) -> bool:
    """Take the note of ``rollout_id`` away; ``False`` when there was none (caller holds the
    sessions lock)."""
    found = await load(session, paths)
    if found.pop(rollout_id, None) is None and found.pop(sealed(rollout_id), None) is None:
        return False
    await _save(session, paths, found)
    return True
