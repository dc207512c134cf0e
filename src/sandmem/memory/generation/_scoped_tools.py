"""The consolidation agent's tools, confined to one layout's ``memories_dir``.

Paths are workspace-relative like every path in sandmem (``memories/MEMORY.md``). Reads and
searches may reach any file under ``memories_dir``; writes only ``MEMORY.md``,
``memory_summary.md`` and ``skills/**`` (``write_files`` writes several in one call, so one
model turn can write both consolidated files), never a hidden path, and skill files within
their budgets. No symlink under the memory directory is ever followed. There is no shell.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from pydantic import BaseModel

from sandmem._errors import SandboxError, UserError
from sandmem._truncate import truncate_head_tail
from sandmem.agent._tools import FunctionTool, function_tool
from sandmem.memory import _files
from sandmem.memory.layout import is_editable
from sandmem.sandboxes._apply_patch import apply_patch as apply_patch_engine
from sandmem.sandboxes._session import SandboxSession

_MAX_READ_TOKENS = 20_000
_MAX_SEARCH_HITS = 200


class MemoryFile(BaseModel):
    """One file for ``write_files``: its workspace-relative path and its whole new content."""

    path: str
    content: str


#: directories below this depth under the memory directory are not listed or searched
_MAX_WALK_DEPTH = 12


class ScopedFiles:
    """Session file primitives restricted to ``memories_dir`` (writes to the writable set).

    Every operation runs under ``no_symlinks()``: a symlink under the memory directory is never
    followed (a symlinked directory on the way is refused, a symlink as the file is treated as
    absent, listed nowhere, and replaced by a write). Writes refuse hidden paths (a component
    starting with ``.``) and files under ``skills/`` over the skill budgets.
    """

    def __init__(
        self,
        session: SandboxSession,
        memories_dir: str,
        *,
        skill_file_max_bytes: int | None = None,
        skills_max_bytes: int | None = None,
    ) -> None:
        self._session = session
        self.root = memories_dir.rstrip("/")
        self._skill_file_max = skill_file_max_bytes
        self._skills_max = skills_max_bytes

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
            if not is_editable(rel):
                raise UserError(
                    f"{path!r} is read-only here: write only {self.root}/MEMORY.md, "
                    f"{self.root}/memory_summary.md and {self.root}/skills/**"
                )
            if any(part.startswith(".") for part in rel.split("/")):
                raise UserError(
                    f"{path!r} is a hidden path (a name starting with '.'): memory files may "
                    "not be hidden; use a plain name"
                )
        return norm

    async def read_bytes(self, path: str) -> bytes:
        return await _files.read_bytes(self._session, self.check(path))

    async def write(self, path: str, data: bytes | str) -> None:
        target = self.check(path, write=True)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        await self.check_budget(target, len(payload))
        await _files.write(self._session, target, data)

    async def exists(self, path: str) -> bool:
        return await _files.exists(self._session, self.check(path))

    async def mkdir(self, path: str, parents: bool = True) -> None:
        await _files.mkdir(self._session, self.check(path, write=True), parents=parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        await _files.remove(self._session, self.check(path, write=True), recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        await _files.rename(self._session, self.check(src, write=True), self.check(dst, write=True))

    async def check_budget(self, target: str, size: int) -> None:
        """``UserError`` when writing ``size`` bytes to ``target`` would break a skill
        budget (per file, or all of ``skills/`` together)."""
        skills = f"{self.root}/skills/"
        if not target.startswith(skills):
            return
        if self._skill_file_max is not None and size > self._skill_file_max:
            raise UserError(
                f"{target} would be {size} bytes, over the budget of {self._skill_file_max} "
                "bytes per skill file; keep a skill short (the procedure, not the transcript)"
            )
        if self._skills_max is None:
            return
        others = [p for p in await self.walk(skills.rstrip("/")) if p != target]
        sizes = await _files.stat_many(self._session, others)
        total = size + sum(st.size for st in sizes.values() if st is not None)
        if total > self._skills_max:
            raise UserError(
                f"writing {target} would make {skills} {total} bytes, over its budget of "
                f"{self._skills_max}; merge or shorten skills first"
            )

    async def walk(self, path: str) -> list[str]:
        """Every regular file below ``path`` (sorted, workspace-relative). Hidden entries and
        symlinks are skipped (never followed, so a link loop cannot recurse); directories
        deeper than ``_MAX_WALK_DEPTH`` are not entered."""
        top = self.check(path)
        if not await _files.is_dir(self._session, top):
            return [top] if await _files.exists(self._session, top) else []
        found: list[str] = []
        pending = [(top, 0)]
        while pending:
            directory, depth = pending.pop()
            for name in await _files.listdir(self._session, directory):
                if name.startswith("."):
                    continue
                child = f"{directory}/{name}"
                if await _files.is_dir(self._session, child):
                    if depth < _MAX_WALK_DEPTH:
                        pending.append((child, depth + 1))
                elif await _files.exists(self._session, child):
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
        await scoped.check_budget(target, len(content.encode("utf-8")))
    for target, content in targets:
        await _files.mkdir(session, target.rsplit("/", 1)[0], parents=True)
        await scoped.write(target, content)
        written.append(f"wrote {target} ({len(content.encode('utf-8'))} bytes)")
    return "\n".join(written)


def scoped_tools(
    session: SandboxSession,
    memories_dir: str,
    *,
    skill_file_max_bytes: int | None = None,
    skills_max_bytes: int | None = None,
) -> list[FunctionTool]:
    scoped = ScopedFiles(
        session,
        memories_dir,
        skill_file_max_bytes=skill_file_max_bytes,
        skills_max_bytes=skills_max_bytes,
    )

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
