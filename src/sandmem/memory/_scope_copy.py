"""The private copy a read-only memory scope is read from, so that reading it never writes
it: every read of a layout may write (the derived index and its lock, the layout lock, a
planted link moved aside), and a team's memory may sit on a read-only mount.

``refresh(source, copy, paths)`` brings ``copy``'s layout to the distilled memory files of
``source`` (the summary, ``MEMORY.md``, rollout summaries, skills: what a run reads) — the
source is only listed and read, through the file access layer (no link followed), and a file
is read again only when its size or modification time changed since the last refresh (kept
in the copy's hidden ``.copied.json``). Files gone from the source go from the copy.
"""

from __future__ import annotations

import json

from sandmem.memory import _files
from sandmem.memory.layout import MemoryPaths, is_read_file
from sandmem.sandboxes._session import SandboxSession

#: the copy's record of what it holds: path -> [size, mtime_ns]
RECORD = ".copied.json"
#: the most bytes copied from one scope (a larger memory is copied up to this)
MAX_COPY_BYTES = 64 * 1024 * 1024


async def refresh(source: SandboxSession, copy: SandboxSession, paths: MemoryPaths) -> bool:
    """Bring the copy up to ``source``'s distilled memory files; True when a file changed."""
    prefix = paths.memories_dir + "/"
    listed = await _files.walk(source, paths.memories_dir)
    wanted = {
        path: stat
        for path, stat in sorted(listed.items())
        if path.startswith(prefix) and is_read_file(path[len(prefix) :])
    }
    record_path = prefix + RECORD
    for directory in (paths.memories_dir, paths.sessions_dir):
        if not await _files.is_dir(copy, directory):
            await _files.mkdir(copy, directory)
    record = _parse(await _files.read(copy, record_path))
    changed = False
    total = 0
    kept: dict[str, list[int | None]] = {}
    for path, (size, mtime) in wanted.items():
        total += size
        if total > MAX_COPY_BYTES:
            break
        if record.get(path) == [size, mtime]:
            kept[path] = [size, mtime]
            continue
        data = await _files.read(source, path)
        if data is None:
            continue
        await _files.write(copy, path, data)
        kept[path] = [size, mtime]
        changed = True
    for path in await _files.walk(copy, paths.memories_dir):
        if path not in kept:
            await _files.remove(copy, path, missing_ok=True)
            changed = True
    if changed or kept != record:
        await _files.write(copy, record_path, json.dumps(kept, sort_keys=True))
    return changed


def _parse(data: bytes | None) -> dict[str, list[int | None]]:
    """The record read back (hostile like any file): anything malformed is an empty record,
    so every file is copied again."""
    if not data or len(data) > 8 * 1024 * 1024:
        return {}
    try:
        found = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {
        str(path): value
        for path, value in found.items()
        if isinstance(value, list)
        and len(value) == 2
        and all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in value)
    }
