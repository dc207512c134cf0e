"""Live edits of memory files: the one path by which a run's ``apply_patch`` (with
``MemoryReadConfig(live_update=True)``) and the MCP server's ``memory_update`` change files
under a ``memories_dir`` outside a consolidation.

A patch is applied with the ``apply_patch`` engine through a view of the session that redacts
what it writes under a guarded memory directory, while holding the layout lock
(``<memories_dir>/.lock``) of every memory directory it touches, so an edit waits for a running
consolidation instead of racing it (and fails with the lock's ``SandboxError`` after
``lock_timeout`` seconds, changing nothing).

``LiveEditPolicy`` is what a run's ``apply_patch`` does with memory files: the ``Memory``
capability guards its layout there (and, in review mode, opens a proposal's overlay), the
``Filesystem`` capability applies patches through it. One policy a run, in the run context's
``extras`` under the class itself (``run_policy``).
"""

from __future__ import annotations

import contextlib
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandmem._errors import SandboxError
from sandmem.memory import _files
from sandmem.memory.layout import is_editable
from sandmem.sandboxes._apply_patch import PatchFiles, PatchResult, apply_patch

if TYPE_CHECKING:
    from sandmem.redaction import Redactor
    from sandmem.sandboxes._session import SandboxSession

#: ``(memories_dir, Redactor)``: writes under that directory are redacted first
Guards = list[tuple[str, "Redactor"]]
#: ``{memories_dir: {workspace path: bytes | None}}``: a proposing directory's writes (``None``:
#: deleted), kept out of the workspace
Overlays = dict[str, dict[str, bytes | None]]


class RedactingFiles:
    """The session, with writes under a guarded memory directory redacted first, and those
    under a proposing directory kept in its overlay (review mode)."""

    def __init__(
        self,
        session: SandboxSession,
        guards: Guards,
        overlays: Overlays | None = None,
    ) -> None:
        self._session = session
        self._guards = guards
        self._overlays = overlays or {}

    def _redactor(self, path: str) -> Redactor | None:
        directory = self.directory(path)
        return None if directory is None else dict(self._guards)[directory]

    def directory(self, path: str) -> str | None:
        """The guarded memory directory ``path`` lies in, if any."""
        rel = workspace_relative(self._session, path)
        for directory, _redactor in self._guards:
            if rel == directory or rel.startswith(directory + "/"):
                return directory
        return None

    def _overlay(self, path: str) -> tuple[dict[str, bytes | None] | None, str]:
        directory = self.directory(path)
        overlay = None if directory is None else self._overlays.get(directory)
        return overlay, workspace_relative(self._session, path)

    def _guarded(self, path: str) -> str | None:
        """The workspace-relative path when ``path`` lies in a guarded memory directory (then
        it is reached only through the memory file layer), else ``None``."""
        return workspace_relative(self._session, path) if self.directory(path) else None

    async def write(self, path: str, data: bytes | str) -> None:
        redactor = self._redactor(path)
        if redactor is not None:
            try:
                text = data.decode("utf-8") if isinstance(data, bytes) else data
            except UnicodeDecodeError:
                pass
            else:
                data = redactor.redact(text)
        overlay, rel = self._overlay(path)
        if overlay is not None:
            overlay[rel] = data.encode("utf-8") if isinstance(data, str) else data
            return
        if (guarded := self._guarded(path)) is not None:
            await _files.write(self._session, guarded, data)
        else:
            await self._session.write(path, data)

    async def read_bytes(self, path: str) -> bytes:
        overlay, rel = self._overlay(path)
        if overlay is not None and rel in overlay:
            data = overlay[rel]
            if data is None:
                raise SandboxError(f"{rel}: no such file", operation="read", path=rel)
            return data
        if (guarded := self._guarded(path)) is not None:
            return await _files.read_bytes(self._session, guarded)
        return await self._session.read_bytes(path)

    async def exists(self, path: str) -> bool:
        overlay, rel = self._overlay(path)
        if overlay is not None and rel in overlay:
            return overlay[rel] is not None
        if (guarded := self._guarded(path)) is not None:
            return await _files.exists(self._session, guarded)
        return await self._session.exists(path)

    async def mkdir(self, path: str, parents: bool = True) -> None:
        if self._overlay(path)[0] is not None:
            return
        if (guarded := self._guarded(path)) is not None:
            await _files.mkdir(self._session, guarded, parents=parents)
        else:
            await self._session.mkdir(path, parents=parents)

    async def remove(self, path: str, recursive: bool = False) -> None:
        overlay, rel = self._overlay(path)
        if overlay is not None:
            overlay[rel] = None
            return
        if (guarded := self._guarded(path)) is not None:
            await _files.remove(self._session, guarded, recursive=recursive)
        else:
            await self._session.remove(path, recursive=recursive)

    async def rename(self, src: str, dst: str) -> None:
        if self._guarded(src) is None and self._guarded(dst) is None:
            await self._session.rename(src, dst)
            return
        await self.write(dst, await self.read_bytes(src))
        await self.remove(src)


def workspace_relative(session: SandboxSession, path: str) -> str:
    """``path`` (relative, or absolute under the session's root as the model sees it) as a
    normalised workspace-relative path; ``..`` cannot climb above the root here (the
    host-filesystem layer refuses real escapes when the path is used)."""
    raw = path.strip()
    for prefix in (session.display_root, str(session.root)):
        if raw == prefix or raw.startswith(prefix.rstrip("/") + "/"):
            raw = raw[len(prefix) :]
            break
    return posixpath.normpath("/" + raw).lstrip("/")


def patch_targets(patch: str) -> list[str] | None:
    """Every path a patch adds, updates, deletes or moves to; ``None`` when it does not parse
    (``apply_patch`` reports why)."""
    from sandmem.sandboxes._patch_format import PatchError, parse_patch

    try:
        ops = parse_patch(patch)
    except PatchError:
        return None
    return [p for op in ops for p in (op.path, getattr(op, "move_to", None)) if p]


def memory_locks(session: SandboxSession, patch: str, guards: Guards) -> list[str]:
    """The layout locks (``<memories_dir>/.lock``) of the memory directories a patch touches,
    sorted; none for a patch that does not parse (``apply_patch`` reports it)."""
    if not guards:
        return []
    targets = patch_targets(patch) or []
    files = RedactingFiles(session, guards)
    found = {files.directory(target) for target in targets}
    return sorted(f"{directory}/.lock" for directory in found if directory is not None)


async def apply_live_edit(
    session: SandboxSession,
    patch: str,
    guards: Guards,
    *,
    overlays: Overlays | None = None,
    lock_timeout: float | None = None,
) -> PatchResult:
    """Apply ``patch``: writes under a guarded memory directory are redacted (or kept in
    ``overlays[memories_dir]`` for a proposing directory), and each touched layout's lock is
    held while it applies."""
    files: PatchFiles = RedactingFiles(session, guards, overlays) if guards else session
    async with contextlib.AsyncExitStack() as stack:
        for lock in memory_locks(session, patch, guards):
            await stack.enter_async_context(_files.lock(session, lock, timeout=lock_timeout))
        return await apply_patch(files, patch)


@dataclass
class LiveEditPolicy:
    """One run's rules for edits of memory files (see the module docstring): ``guards`` are
    redacted when written, a directory in ``overlays`` (review mode,
    ``MemoryReadConfig(live_update="propose")``) is written to its overlay instead of the
    workspace; the ``Memory`` capability turns that into a proposal when the run ends."""

    guards: Guards = field(default_factory=list)
    overlays: Overlays = field(default_factory=dict)
    #: ``{memories_dir: {workspace path}}``: the memory files the run's patches changed in
    #: place (``live_update=True``); its end versions them as the run's, the rest apart
    edits: dict[str, set[str]] = field(default_factory=dict)

    def guard(self, memories_dir: str, redactor: Redactor) -> None:
        """Redact what the run writes under ``memories_dir``."""
        self.guards.append((memories_dir, redactor))

    def propose(self, memories_dir: str) -> None:
        """Keep what the run writes under ``memories_dir`` in a fresh overlay."""
        self.overlays[memories_dir] = {}

    def track(self, memories_dir: str) -> None:
        """Note which memory files under ``memories_dir`` the run's patches change."""
        self.edits[memories_dir] = set()

    def edited(self, memories_dir: str) -> frozenset[str]:
        """The files (relative to ``memories_dir``) the run's patches changed there."""
        root = memories_dir + "/"
        return frozenset(p[len(root) :] for p in self.edits.get(memories_dir, ()))

    def overlay(self, memories_dir: str) -> dict[str, bytes | None]:
        """The run's proposed writes under ``memories_dir`` (empty when none)."""
        return self.overlays.get(memories_dir, {})

    async def apply(self, session: SandboxSession, patch: str) -> PatchResult:
        """Apply ``patch`` under this policy (``apply_live_edit``)."""
        targets = [workspace_relative(session, t) for t in patch_targets(patch) or []]
        for directory in self.overlays:
            refused = [t for t in targets if _not_proposable(directory, t)]
            if refused:
                raise SandboxError(
                    f"apply_patch: {', '.join(refused)} cannot be proposed: in review mode only "
                    f"{directory}/MEMORY.md, {directory}/memory_summary.md and {directory}/"
                    "skills/ take proposals (memory generation writes the rest); nothing was "
                    "changed",
                    operation="apply_patch",
                    path=refused[0],
                )
        result = await apply_live_edit(session, patch, self.guards, overlays=self.overlays)
        for directory, touched in self.edits.items():
            touched.update(t for t in targets if t.startswith(directory + "/"))
        return result


def _not_proposable(memories_dir: str, path: str) -> bool:
    """Whether ``path`` lies in ``memories_dir`` but is no file a proposal can hold (only
    ``MEMORY.md``, ``memory_summary.md`` and ``skills/**`` are)."""
    root = memories_dir + "/"
    if not path.startswith(root):
        return False
    return not is_editable(path[len(root) :])


def run_policy(extras: dict[Any, Any]) -> LiveEditPolicy:
    """The run's policy, made on first use (``extras``: the run context's)."""
    policy = extras.setdefault(LiveEditPolicy, LiveEditPolicy())
    assert isinstance(policy, LiveEditPolicy)
    return policy
