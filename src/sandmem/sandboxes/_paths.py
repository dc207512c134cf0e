"""Path policy: the rules for a caller's or a model's path, and the ``no_symlinks()`` mode.

The rules (enforced race-free by ``_hostfs``/``_fdwalk``; ``resolve_path`` states them by name):

- relative paths are relative to the workspace root; a ``..`` that climbs above the root is
  refused (``a/../b`` is fine);
- absolute paths are accepted only when they lead inside the root;
- symlinks are resolved: a path whose real location (of the target, or of its deepest existing
  ancestor when the target does not exist yet) is outside the root is refused.

``resolve_path`` is a name-based check, kept for callers that need a host path for display.
The file primitives themselves do not use it: ``_hostfs`` walks every path from a descriptor
of the root (``_fdwalk``), so a directory swapped for a symlink between a check and a use can
never redirect an operation. ``no_symlinks()`` makes that walk refuse every symlink (the
memory pipeline runs under it).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator
from pathlib import Path

from sandmem._errors import SandboxPathError

PathArg = str | os.PathLike[str]


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


_NO_SYMLINKS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sandmem_no_symlinks", default=False
)


@contextlib.contextmanager
def no_symlinks() -> Iterator[None]:
    """Within this context (and the tasks and worker threads started from it) the file
    primitives of host-directory sessions follow no symlink at all: a symlinked directory on
    the way is refused, a symlink as the last component is not read or listed (``exists`` and
    ``is_dir`` say ``False``), a write replaces it with a regular file, and ``read_many``
    skips it with a warning. The memory pipeline and its tools run under it."""
    token = _NO_SYMLINKS.set(True)
    try:
        yield
    finally:
        _NO_SYMLINKS.reset(token)


def symlinks_refused() -> bool:
    """True inside ``no_symlinks()``."""
    return _NO_SYMLINKS.get()


def refusal(operation: str, path: str, root: str, why: str) -> SandboxPathError:
    return _refuse(operation, path, root, why)


def _refuse(operation: str, path: str, root: str, why: str) -> SandboxPathError:
    return SandboxPathError(
        f"{operation} {path!r} refused: {why}. Paths must be workspace-relative (like "
        f"'notes/todo.md'); absolute paths are accepted only inside the workspace root {root}.",
        operation=operation,
        path=path,
    )


def resolve_path(
    root: Path, path: PathArg, *, operation: str, follow_symlinks: bool = True
) -> Path:
    """Return the host path for ``path`` inside the workspace ``root`` or raise
    ``SandboxPathError``.

    ``root`` must be a real path (no symlinks). With ``follow_symlinks`` (reading, writing,
    listing) the returned path is fully resolved, so a write through an inner symlink lands on
    its target. Without it (remove, rename) only the parent is resolved and the last component
    is returned as is, so an operation acts on a symlink itself.
    """
    raw = os.fspath(path)
    if not isinstance(raw, str):
        raise _refuse(operation, repr(raw), str(root), "the path must be a string")
    root_s = str(root)
    if "\x00" in raw:
        raise _refuse(operation, raw, root_s, "the path contains a NUL byte")
    if os.path.isabs(raw):
        lexical = os.path.normpath(raw)
    else:
        lexical = os.path.normpath(os.path.join(root_s, raw or "."))
        if not _within(lexical, root_s):
            raise _refuse(operation, raw, root_s, "'..' leads outside the workspace")
    if lexical.startswith("//"):  # POSIX normpath keeps a leading '//'
        lexical = "/" + lexical.lstrip("/")
    if follow_symlinks or lexical == root_s:
        real = os.path.realpath(lexical)
    else:
        parent, name = os.path.split(lexical)
        real = os.path.join(os.path.realpath(parent), name)
    if not _within(real, root_s):
        if os.path.isabs(raw) and not _within(lexical, root_s):
            why = "the absolute path is outside the workspace"
        else:
            why = f"it resolves through a symlink to {real}, outside the workspace"
        raise _refuse(operation, raw, root_s, why)
    return Path(real)
