"""Manifest entries that come from the host: ``LocalFile``, ``LocalDir``, ``GitRepo``.

Sources are read without following symlinks inside them (``_hostfs.walk_tree`` walks by
descriptors); everything is written into the workspace through the host-filesystem layer, so a
destination path is checked like any other. Blocking: called from the client's worker thread.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sandmem._errors import (
    GitCloneError,
    LocalDirReadError,
    LocalFileReadError,
    SandboxError,
    SandboxPathError,
)
from sandmem.sandboxes import _hostfs
from sandmem.sandboxes._manifest import AnyEntry, Dir, GitRepo, LocalDir, LocalFile

logger = logging.getLogger("sandmem.sandboxes")

#: a ref that names a commit (abbreviated or full) rather than a branch or tag
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
#: time budget of one ``git`` call
GIT_TIMEOUT_S = 300.0
_SETID = stat.S_ISUID | stat.S_ISGID


def materialize(root: Path, rel: str, entry: LocalFile | LocalDir | GitRepo) -> None:
    if isinstance(entry, LocalFile):
        _local_file(root, rel, entry)
    elif isinstance(entry, LocalDir):
        _hostfs.mkdir(root, rel, parents=True)
        if entry.src is not None:
            _copy_tree(entry.src, root, rel, _local_dir_error)
    else:
        _git_repo(root, rel, entry)
    if entry.mode is not None and not isinstance(entry, LocalFile):
        _hostfs.set_dir_mode(root, rel, entry.mode)


def _local_dir_error(message: str, path: str) -> SandboxError:
    return LocalDirReadError(message, operation="manifest", path=path)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _local_file(root: Path, rel: str, entry: LocalFile) -> None:
    try:
        fd = os.open(entry.src, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LocalFileReadError(
            f"LocalFile source {entry.src} cannot be opened: {exc.strerror}",
            operation="manifest",
            path=str(entry.src),
        ) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LocalFileReadError(
                f"LocalFile source {entry.src} is not a regular file; use LocalDir for a directory",
                operation="manifest",
                path=str(entry.src),
            )
        os.set_blocking(fd, True)
        data = _read_all(fd)
    finally:
        os.close(fd)
    mode = entry.mode if entry.mode is not None else stat.S_IMODE(st.st_mode)
    _hostfs.write_atomic(root, rel, data, mode=mode & ~_SETID, durable=False)


def _inner_link(rel: str, target: str) -> bool:
    """Whether the symlink ``rel`` -> ``target`` (both relative to the copied tree) stays in it."""
    if os.path.isabs(target):
        return False
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return resolved != ".." and not resolved.startswith("../")


@dataclass
class _Copy:
    """One tree copy in progress: what must be fixed up once every entry is placed."""

    src: Path
    root: Path
    dest: str
    dirs: list[tuple[str, int]] = field(default_factory=list)
    links: list[str] = field(default_factory=list)

    def place(self, item: _hostfs.TreeEntry) -> None:
        target = f"{self.dest}/{item.rel}"
        mode = stat.S_IMODE(item.st.st_mode) & ~_SETID
        if item.link is not None:
            if _inner_link(item.rel, item.link):
                _hostfs.symlink(self.root, target, item.link)
                self.links.append(target)
            else:
                logger.warning("manifest: skipping %s in %s: it points outside", item.rel, self.src)
        elif stat.S_ISDIR(item.st.st_mode):
            _hostfs.mkdir(self.root, target, parents=True)
            self.dirs.append((target, mode))
        elif stat.S_ISREG(item.st.st_mode) and item.fd is not None:
            data = _read_all(item.fd)
            _hostfs.write_atomic(self.root, target, data, mode=mode, durable=False)
        else:
            logger.warning(
                "manifest: skipping %s in %s: not a file or directory", item.rel, self.src
            )

    def finish(self) -> None:
        # a link that looked inner by its text may still lead out through other links
        # (``d/up -> ..`` then ``x -> d/up/d/up/../../../..``): resolve each as the kernel
        # would and drop those that leave the workspace
        for target in self.links:
            if not _hostfs.stays_inside(self.root, target):
                logger.warning("manifest: removing %s: through other links it leads out", target)
                _hostfs.remove(self.root, target)
        for target, mode in reversed(self.dirs):  # deepest first: a read-only one is filled
            _hostfs.set_dir_mode(self.root, target, mode)


def _copy_tree(
    src: Path,
    root: Path,
    dest: str,
    error: Callable[[str, str], SandboxError],
    *,
    skip_git: bool = False,
) -> None:
    """Copy the directory ``src`` to ``dest`` in the workspace: directories, regular files with
    their permission bits (setuid/setgid dropped), inner relative symlinks."""
    try:
        st = os.stat(src)
    except OSError as exc:
        raise error(f"source directory {src} cannot be read: {exc.strerror}", str(src)) from exc
    if not stat.S_ISDIR(st.st_mode):
        raise error(f"source {src} is not a directory; use LocalFile for a file", str(src))
    copy = _Copy(src, root, dest)
    try:
        for item in _hostfs.walk_tree(src):
            if not (skip_git and (item.rel == ".git" or item.rel.startswith(".git/"))):
                copy.place(item)
    except OSError as exc:
        why = exc.strerror or exc
        raise error(f"copying {src} into the workspace failed: {why}", str(src)) from exc
    copy.finish()


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/"),
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _clone(entry: GitRepo, checkout: Path) -> subprocess.CompletedProcess[str]:
    url, ref = entry.url, entry.ref
    if ref is not None and _COMMIT.fullmatch(ref):
        done = _git(
            ["clone", "--quiet", "--no-checkout", "--", url, str(checkout)], checkout.parent
        )
        if done.returncode == 0:
            done = _git(["-C", str(checkout), "checkout", "--quiet", "--detach", ref], checkout)
        return done
    branch = [] if ref is None else ["--branch", ref]
    depth = ["--depth", "1"] if "://" in url and not url.startswith("file://") else []
    args = ["clone", "--quiet", "--no-tags", *depth, *branch, "--", url, str(checkout)]
    return _git(args, checkout.parent)


def _git_repo(root: Path, rel: str, entry: GitRepo) -> None:
    with tempfile.TemporaryDirectory(prefix="sandmem-git-") as tmp:
        checkout = Path(tmp) / "checkout"
        try:
            done = _clone(entry, checkout)
        except FileNotFoundError as exc:
            raise GitCloneError(
                "GitRepo needs the `git` program on PATH; install git",
                url=entry.url,
                ref=entry.ref,
            ) from exc
        except subprocess.TimeoutExpired as exc:
            raise GitCloneError(
                f"git clone of {entry.url} took longer than {GIT_TIMEOUT_S:.0f} s",
                url=entry.url,
                ref=entry.ref,
            ) from exc
        if done.returncode != 0:
            stderr = done.stderr.strip()
            raise GitCloneError(
                f"git could not clone {entry.url}"
                + (f" at {entry.ref!r}" if entry.ref else "")
                + f": {stderr.splitlines()[-1] if stderr else f'exit code {done.returncode}'}",
                url=entry.url,
                ref=entry.ref,
                stderr=stderr,
            )

        def error(message: str, path: str) -> SandboxError:
            return GitCloneError(message, url=entry.url, ref=entry.ref)

        source = checkout if entry.subpath is None else _inside_checkout(checkout, entry, error)
        _hostfs.mkdir(root, rel, parents=True)

        _copy_tree(source, root, rel, error, skip_git=entry.subpath is not None)


def _inside_checkout(
    checkout: Path, entry: GitRepo, error: Callable[[str, str], SandboxError]
) -> Path:
    """The ``subpath`` directory of the checkout, reached without following any link the
    repository commits (a link there could name any host directory)."""
    assert entry.subpath is not None
    current = checkout
    for part in Path(entry.subpath).parts:
        current = current / part
        try:
            st = os.lstat(current)
        except OSError:
            raise error(
                f"the repository has no directory {entry.subpath!r}", str(current)
            ) from None
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise error(
                f"GitRepo subpath {entry.subpath!r}: {part!r} in the repository is {kind}; "
                "links a repository commits are never followed",
                str(current),
            )
    return current


def write_entries(root: Path, entries: dict[str, AnyEntry]) -> None:
    """Write manifest entries under ``root`` (blocking; parents first, paths checked; through
    the host-filesystem layer, so a symlink never redirects an entry)."""
    for rel in sorted(entries):
        _write_entry(root, rel, entries[rel])


def _write_entry(root: Path, rel: str, entry: AnyEntry) -> None:
    if isinstance(entry, LocalFile | LocalDir | GitRepo):
        materialize(root, rel, entry)
        return
    try:
        if isinstance(entry, Dir):
            _hostfs.mkdir(root, rel, parents=True)
            children = {f"{rel}/{name}": child for name, child in entry.children.items()}
            write_entries(root, children)  # before the mode: it may make the directory read-only
            if entry.mode is not None:
                _hostfs.set_dir_mode(root, rel, entry.mode)
        else:
            _hostfs.write_atomic(root, rel, entry.content, mode=entry.mode, durable=False)
    except SandboxPathError:
        raise
    except SandboxError as exc:
        if exc.operation == "manifest":
            raise
        cause = exc.__cause__
        why = cause.strerror if isinstance(cause, OSError) and cause.strerror else exc
        raise SandboxError(
            f"cannot write manifest entry {rel!r} into the workspace {root}: {why}",
            operation="manifest",
            path=rel,
        ) from cause
