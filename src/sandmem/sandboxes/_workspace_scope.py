"""A run's working directory inside the workspace (``SandboxRunConfig(cwd=...)``).

The scope changes only where the model's *relative* paths start: ``exec_command`` runs there,
``apply_patch`` and ``view_image`` resolve relative paths from there, and capabilities that name
session-owned files (memory, skills) show them as absolute sandbox paths, which stay valid
whatever directory a command moves to. Access rules are unchanged: every path still goes through
the session's path policy (``_paths``), so ``../..`` from the cwd cannot leave the workspace.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import PurePath

from sandmem.sandboxes._patch_format import ADD, DELETE, MOVE, UPDATE

_PATH_LINES = (ADD, DELETE, UPDATE, MOVE)


def normalize_cwd(cwd: str | PurePath) -> str:
    """A run cwd as a normalised workspace-relative POSIX path; ``ValueError`` (the reference
    SDK's messages) when it is empty, absolute, climbs with ``..`` or uses backslashes."""
    if isinstance(cwd, PurePath):
        raw = cwd.as_posix()
    elif isinstance(cwd, str):
        if "\\" in cwd:
            raise ValueError("sandbox.cwd must use POSIX path separators")
        raw = cwd
    else:
        raise ValueError("sandbox.cwd must be a string or Path")
    if not raw.strip():
        raise ValueError("sandbox.cwd must be non-empty")
    if raw.startswith("/"):
        raise ValueError("sandbox.cwd must be workspace-relative")
    if ".." in raw.split("/"):
        raise ValueError("sandbox.cwd must not contain parent segments")
    return posixpath.normpath(raw)


@dataclass(frozen=True)
class SandboxWorkspaceScope:
    """Where one run's relative paths start: ``cwd`` (workspace-relative) or the root
    (``None``). Immutable; the runner binds one to each capability of a run."""

    cwd: str | None = None

    def __post_init__(self) -> None:
        if self.cwd is not None:
            cwd = normalize_cwd(self.cwd)
            object.__setattr__(self, "cwd", None if cwd == "." else cwd)

    @classmethod
    def from_cwd(cls, cwd: str | PurePath | None) -> SandboxWorkspaceScope:
        """The scope of a run cwd (``None``: the workspace root)."""
        return cls(cwd=None if cwd is None else normalize_cwd(cwd))

    def anchor(self, path: str | None) -> str | None:
        """``path`` as the session's file and exec primitives take it: a relative path is joined
        under the cwd (``..`` steps are kept for the path policy to judge), an absolute one is
        left alone; ``None`` (no path given) means the cwd itself."""
        if self.cwd is None:
            return path
        if path is None or not path.strip():
            return self.cwd
        if path.startswith("/"):
            return path
        return posixpath.join(self.cwd, path)

    def resource_path(self, display_root: str, workspace_path: str) -> str:
        """How instructions name a session-owned file or directory (``memories/MEMORY.md``):
        workspace-relative without a cwd, else an absolute sandbox path under ``display_root``
        (valid from any directory a command moves to)."""
        if self.cwd is None:
            return workspace_path
        return posixpath.join(display_root.rstrip("/") or "/", posixpath.normpath(workspace_path))

    def anchor_patch(self, patch: str) -> str:
        """An ``apply_patch`` text with each file path anchored (``anchor``); the hunks are
        untouched. A patch that does not parse is returned as it is, for the engine to report."""
        if self.cwd is None:
            return patch
        lines = patch.split("\n")
        for index, line in enumerate(lines):
            for prefix in _PATH_LINES:
                if line.startswith(prefix):
                    lines[index] = prefix + str(self.anchor(line[len(prefix) :].strip()))
                    break
        return "\n".join(lines)
