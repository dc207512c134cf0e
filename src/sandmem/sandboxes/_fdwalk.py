"""The descriptor walk: find a workspace path from an open descriptor of the workspace root,
one component at a time, without ever letting the kernel follow a symlink.

Used only by ``_hostfs`` (the one module that opens workspace paths). Each directory on the way
is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the descriptor of its parent, and the
caller then acts on the last component relative to the parent's descriptor (``dir_fd``). A
directory swapped for a symlink between two steps makes the next ``open`` fail instead of
redirecting it: what was checked is what is used.

A symlink met on the way is either refused (``follow=False``: the memory pipeline, snapshot
restore) or expanded by hand: its target is read, joined to the components already walked and
normalised lexically, and the walk starts again from the root. A ``..`` that would climb above
the root, or an absolute target outside it, is refused; so no expansion can leave the
workspace, and the walk never opens ``..`` itself.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from dataclasses import dataclass

#: flags of every directory opened on the way
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: symlink expansions allowed in one walk (as the kernel's limit)
MAX_SYMLINKS = 40


class Refused(Exception):
    """The path leads outside the workspace, or through a symlink the walk may not follow."""

    def __init__(self, why: str, *, symlink: bool = False) -> None:
        super().__init__(why)
        self.why = why
        #: the refusal is about a symlink that may not be followed (not an escape)
        self.symlink = symlink


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def lexical_parts(root: str, raw: str) -> list[str]:
    """The components of ``raw`` below ``root`` after lexical normalisation (``a/../b`` is
    ``b``); ``Refused`` for a ``..`` above the root or an absolute path outside it."""
    if "\x00" in raw:
        raise Refused("the path contains a NUL byte")
    if os.path.isabs(raw):
        norm = os.path.normpath(raw)
        if norm.startswith("//"):  # POSIX normpath keeps a leading '//'
            norm = "/" + norm.lstrip("/")
        if not within(norm, root):
            raise Refused("the absolute path is outside the workspace")
    else:
        norm = os.path.normpath(os.path.join(root, raw or "."))
        if not within(norm, root):
            raise Refused("'..' leads outside the workspace")
    rel = norm[len(root) :].strip("/")
    return rel.split("/") if rel else []


def readlink_at(name: str, dir_fd: int) -> str | None:
    """The target of the symlink ``name`` in ``dir_fd``, or ``None`` when it is not one."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT):
            return None
        raise


@dataclass
class Located:
    """The open parent directory of a path and its last component (``""`` for the root,
    when ``parent_fd`` is the root itself). The caller owns ``parent_fd`` and closes it."""

    parent_fd: int
    name: str
    parts: list[str]

    def close(self) -> None:
        os.close(self.parent_fd)


def _open_dir(name: str, dir_fd: int, create: bool) -> int:
    for _ in range(8):  # a directory removed again right after we made it: try a few times
        try:
            return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            if not create:
                raise
            try:
                os.mkdir(name, 0o777, dir_fd=dir_fd)
            except FileExistsError:
                pass
    raise OSError(errno.ENOENT, os.strerror(errno.ENOENT), name)


class _Walk:
    """The directories walked so far: a descriptor and a name per level (level 0 is the
    root), and the components still to walk."""

    def __init__(self, root_fd: int, root: str, parts: list[str]) -> None:
        self.root = root
        self.root_fd = root_fd
        self.fds = [os.dup(root_fd)]
        self.names: list[str] = []
        self.todo = deque(parts)
        self.expansions = 0

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())

    def up(self, why: str) -> None:
        if not self.names:
            raise Refused(why)
        os.close(self.fds.pop())
        self.names.pop()

    def down(self, name: str, fd: int) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def splice(self, target: str) -> None:
        """Continue the walk through the symlink target ``target`` (as the kernel does: its
        ``..`` climb from the directory the link is in)."""
        self.expansions += 1
        if self.expansions > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        if os.path.isabs(target):
            norm = os.path.normpath(target)
            if not within(norm, self.root):
                raise Refused(f"it resolves through a symlink to {norm}, outside the workspace")
            while self.names:
                self.up("")
            base = norm[len(self.root) :].strip("/")
            target = base
        self.todo.extendleft(reversed([p for p in target.split("/") if p not in ("", ".")]))

    def pending_final(self) -> bool:
        """True when exactly one name is left to walk (the last component)."""
        return len(self.todo) == 1 and self.todo[0] != ".."


def locate(
    root_fd: int,
    root: str,
    parts: list[str],
    *,
    follow: bool = True,
    follow_last: bool = True,
    create_parents: bool = False,
) -> Located:
    """Open every directory of ``parts`` but the last and return it with the last name.

    ``follow``: expand symlinks met on the way (inside the workspace only); otherwise a
    symlink raises ``Refused(symlink=True)``. ``follow_last``: also expand the last component
    when it is a symlink. ``create_parents``: create missing directories on the way.
    ``root_fd`` stays the caller's; the returned ``parent_fd`` is a new descriptor.
    """
    walk = _Walk(root_fd, root, parts)
    try:
        while walk.todo:
            if walk.pending_final():
                name = walk.todo[0]
                target = readlink_at(name, walk.fds[-1]) if follow and follow_last else None
                if target is None:
                    walk.todo.clear()
                    return Located(walk.fds.pop(), name, [*walk.names, name])
                walk.todo.popleft()
                walk.splice(target)
                continue
            name = walk.todo.popleft()
            if name == "..":
                walk.up(f"a symlink leads above the workspace root {root}, outside the workspace")
                continue
            _step(walk, name, follow, create_parents)
        # the path ends in a directory reached through ".." (or is the root)
        if not walk.names:
            return Located(walk.fds.pop(), "", [])
        name = walk.names[-1]
        os.close(walk.fds.pop())
        walk.names.pop()
        return Located(walk.fds.pop(), name, [*walk.names, name])
    finally:
        walk.close()


def _step(walk: _Walk, name: str, follow: bool, create: bool) -> None:
    try:
        child = _open_dir(name, walk.fds[-1], create)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        target = readlink_at(name, walk.fds[-1])
        if target is None:
            raise
        if not follow:
            shown = "/".join([*walk.names, name])
            raise Refused(
                f"{shown!r} is a symlink, which is not followed here", symlink=True
            ) from None
        walk.splice(target)
        return
    walk.down(name, child)
