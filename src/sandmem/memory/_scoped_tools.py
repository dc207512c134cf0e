"""The consolidation agent's tools, confined to one layout's ``memories_dir``.

Paths are workspace-relative like every path in sandmem (``memories/MEMORY.md``). Reads and
searches may reach any file under ``memories_dir``; writes only ``MEMORY.md``,
``memory_summary.md`` and ``skills/**`` (``write_files`` writes several in one call, so one
model turn can write both consolidated files). There is no shell.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel

from sandmem._errors import SandboxError, UserError
from sandmem._tools import FunctionTool, function_tool
from sandmem._truncate import truncate_head_tail
from sandmem.capabilities._apply_patch import apply_patch as apply_patch_engine
from sandmem.sandboxes._session import SandboxSession

_MAX_READ_TOKENS = 20_000
_MAX_SEARCH_HITS = 200


class MemoryFile(BaseModel):
    """One file for ``write_files``: its workspace-relative path and its whole new content."""

    path: str
    content: str


class ScopedFiles:
    """Session file primitives restricted to ``memories_dir`` (writes to the writable set)."""

    def __init__(self, session: SandboxSession, memories_dir: str) -> None:
        self._session = session
        self.root = memories_dir.rstrip("/")

    def check(self, path: str, *, write: bool = False) -> str:
        raw = (path or "").strip().replace("\\", "/")
        parts = [p for p in PurePosixPath(raw).parts if p not in ("", ".")]
        if raw.startswith("/") or ".." in parts:
            raise UserError(f"path {path!r} must be workspace-relative inside {self.root}/")
        norm = "/".join(parts)
        if norm != self.root and not norm.startswith(self.root + "/"):
            raise UserError(f"path {path!r} is outside the memory directory {self.root}/")
        if write:
            rel = norm[len(self.root) + 1 :]
            if rel not in ("MEMORY.md", "memory_summary.md") and not rel.startswith("skills/"):
                raise UserError(
                    f"{path!r} is read-only here: write only {self.root}/MEMORY.md, "
                    f"{self.root}/memory_summary.md and {self.root}/skills/**"
                )
        return norm

    async def read_bytes(self, path: str) -> bytes:
        return await self._session.read_bytes(self.check(path))

    async def write(self, path: str, data: bytes | str) -> None:
        await self._session.write(self.check(path, write=True), data)

    async def exists(self, path: str) -> bool:
        return await self._session.exists(self.check(path))

    async def mkdir(self, path: str, parents: bool = True) -> None:
        await self._session.mkdir(self.check(path, write=True), parents=parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await self._session.remove(self.check(path, write=True), recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        await self._session.rename(self.check(src, write=True), self.check(dst, write=True))

    async def walk(self, path: str) -> list[str]:
        """Every file below ``path`` (sorted, workspace-relative); hidden entries skipped."""
        top = self.check(path)
        if not await self._session.is_dir(top):
            return [top] if await self._session.exists(top) else []
        found: list[str] = []
        for name in await self._session.listdir(top):
            if name.startswith("."):
                continue
            child = f"{top}/{name}"
            if await self._session.is_dir(child):
                found.extend(await self.walk(child))
            else:
                found.append(child)
        return sorted(found)


async def _search(scoped: ScopedFiles, pattern: str, path: str | None) -> str:
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise UserError(f"invalid regular expression {pattern!r}: {exc}") from exc
    hits: list[str] = []
    for name in await scoped.walk(path or scoped.root):
        try:
            text = (await scoped.read_bytes(name)).decode("utf-8", "replace")
        except SandboxError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if regex.search(line):
                hits.append(f"{name}:{number}: {line[:300]}")
                if len(hits) >= _MAX_SEARCH_HITS:
                    return "\n".join([*hits, "(more hits not shown)"])
    return "\n".join(hits) or "(no matches)"


async def _write(session: SandboxSession, scoped: ScopedFiles, items: list[MemoryFile]) -> str:
    """Check every path first (nothing is written when one is refused), then write each."""
    targets = [(scoped.check(item.path, write=True), item.content) for item in items]
    if not targets:
        raise UserError("give at least one file to write")
    written = []
    for target, content in targets:
        await session.mkdir(target.rsplit("/", 1)[0], parents=True)  # inside the checked path
        await scoped.write(target, content)
        written.append(f"wrote {target} ({len(content.encode('utf-8'))} bytes)")
    return "\n".join(written)


def scoped_tools(session: SandboxSession, memories_dir: str) -> list[FunctionTool]:
    scoped = ScopedFiles(session, memories_dir)

    @function_tool
    async def read_file(path: str) -> str:
        """Read a text file under the memory directory (long files are cut head+tail)."""
        text = (await scoped.read_bytes(path)).decode("utf-8", "replace")
        return truncate_head_tail(text, _MAX_READ_TOKENS, what=path) or "(empty file)"

    @function_tool
    async def list_files(path: str) -> str:
        """List the files below a directory of the memory directory, recursively."""
        listed = await scoped.walk(path)
        return "\n".join(listed) or "(no files)"

    @function_tool
    async def search_files(pattern: str, path: str | None = None) -> str:
        """Search files under the memory directory (or under `path`) for a regular expression,
        case-insensitive; returns `file:line: text` hits."""
        return await _search(scoped, pattern, path)

    @function_tool
    async def write_file(path: str, content: str) -> str:
        """Write a whole file (MEMORY.md, memory_summary.md or skills/**), replacing it."""
        return await _write(session, scoped, [MemoryFile(path=path, content=content)])

    @function_tool
    async def write_files(files: list[MemoryFile]) -> str:
        """Write several whole files in one call (for example MEMORY.md and
        memory_summary.md together), each replacing its old content."""
        return await _write(session, scoped, files)

    @function_tool
    async def apply_patch(patch: str) -> str:
        """Apply a `*** Begin Patch` patch to files in the memory directory."""
        result = await apply_patch_engine(scoped, patch)
        return result.render()

    return [read_file, list_files, search_files, write_file, write_files, apply_patch]
