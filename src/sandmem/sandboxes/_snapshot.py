"""Workspace snapshots: a tar archive per session under a base directory.

Format (``<base_path>/<session_id>.tar``): an uncompressed POSIX (pax) tar whose global header
carries ``sandmem.snapshot_format=1`` and ``sandmem.session_id``. Members are workspace-relative
paths in walk order (a directory before its contents): directories (also empty ones), regular
files and symlinks, with permission bits and mtimes. Symlinks are kept only when they point
inside the workspace; an absolute target inside the workspace is stored relative so it stays
valid in the restored workspace. Other file types (sockets, fifos, devices) are skipped.

The archive is written to a temporary name in ``base_path``, fsynced, and renamed, so a crash
leaves the previous snapshot or the new one, never half of one. A temp file left by a killed
stop is removed by the session's next successful snapshot once it is ``STALE_TEMP_S`` old.

Snapshots work on the session's host path (``session.root``), so every backend whose workspace
is a host directory gets them for free.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import stat
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator

from sandmem._errors import SandboxError, SandboxPathError, SandboxStateError
from sandmem.sandboxes import _hostfs
from sandmem.sandboxes._hostfs import remove_tree
from sandmem.sandboxes._paths import no_symlinks

if TYPE_CHECKING:
    from sandmem.sandboxes._session import SandboxSession

logger = logging.getLogger("sandmem.sandboxes")

SNAPSHOT_FORMAT = "1"
WORKSPACE_PREFIX = "sandmem-ws-"
#: permission bits restored; setuid/setgid are dropped
_MODE_MASK = 0o1777
#: a temp archive untouched this long was left by a stop that was killed mid-write
STALE_TEMP_S = 600.0


class LocalSnapshotSpec(BaseModel):
    """Snapshot the workspace to ``base_path/<session_id>.tar`` when the session stops.

    Fields as in the reference SDK: ``type`` (always ``"local"``; ``kind`` is read from states
    written by earlier sandmem versions) and ``base_path``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    type: Literal["local"] = Field(default="local", validation_alias=AliasChoices("type", "kind"))
    base_path: Path

    def __init__(self, base_path: str | os.PathLike[str] | None = None, **data: Any) -> None:
        if base_path is not None:
            data["base_path"] = base_path
        super().__init__(**data)

    @field_validator("base_path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().absolute()

    def path_for(self, session_id: str) -> Path:
        return self.base_path / f"{session_id}.tar"

    def live_lock_for(self, session_id: str) -> Path:
        """Held (``flock``) by a running session of ``session_id``: its root is in use."""
        return self.base_path / f".{session_id}.live"

    # Remote specs (``sandmem.distributed.S3SnapshotSpec``) move the archive; a local one has
    # nothing to move.
    def upload(self, session_id: str) -> None:
        """After ``path_for(session_id)`` was written."""

    def download(self, session_id: str) -> None:
        """Before ``path_for(session_id)`` is restored."""

    def delete_remote(self, session_id: str) -> None:
        """When the snapshot is deleted."""


# -- taking a snapshot --------------------------------------------------------------------------


def _link_target(root: str, rel: str, target: str) -> str | None:
    """The target to store for the symlink at ``rel`` pointing to ``target``, or None when it
    leads outside."""
    parent = os.path.dirname(os.path.join(root, rel))
    if os.path.isabs(target):
        target = os.path.relpath(os.path.normpath(target), parent)
    resolved = os.path.normpath(os.path.join(parent, target))
    if resolved != root and not resolved.startswith(root + "/"):
        return None
    return target


def _add_tree(tar: tarfile.TarFile, root: Path, skip: tuple[int, int] | None) -> None:
    """Add everything below ``root`` (through the host-fs layer: no symlink is followed and
    every file is opened without blocking); ``skip`` identifies the snapshot directory when it
    lies inside the workspace."""
    for entry in _hostfs.walk_tree(root, skip=skip):
        st = entry.st
        info = tarfile.TarInfo(entry.rel)
        info.mode = stat.S_IMODE(st.st_mode) & _MODE_MASK
        info.mtime = st.st_mtime
        if entry.link is not None:
            target = _link_target(str(root), entry.rel, entry.link)
            if target is None:
                logger.warning("snapshot: skipping symlink %s: it points outside", entry.rel)
                continue
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        elif stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        elif stat.S_ISREG(st.st_mode) and entry.fd is not None:
            info.size = st.st_size
            with os.fdopen(os.dup(entry.fd), "rb") as fh:
                tar.addfile(info, fh)
        else:
            logger.warning("snapshot: skipping %s: not a file, directory or symlink", entry.rel)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(root: Path, session_id: str, spec: LocalSnapshotSpec) -> Path:
    """Archive ``root`` to ``spec.path_for(session_id)`` (blocking)."""
    final = spec.path_for(session_id)
    try:
        spec.base_path.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=spec.base_path, prefix=f".{session_id}.", suffix=".tmp")
    except OSError as exc:
        raise SandboxError(
            f"cannot write a snapshot under {spec.base_path}: {exc.strerror}",
            operation="snapshot",
            path=str(spec.base_path),
        ) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            headers = {"sandmem.snapshot_format": SNAPSHOT_FORMAT, "sandmem.session_id": session_id}
            with tarfile.open(
                fileobj=fh, mode="w", format=tarfile.PAX_FORMAT, pax_headers=headers
            ) as tar:
                _add_tree(tar, root, _identity(spec.base_path))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        _fsync_dir(spec.base_path)
        _sweep_stale_temps(spec.base_path, session_id)
        spec.upload(session_id)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise SandboxError(
                f"snapshot of {root} failed: {exc}", operation="snapshot", path=str(final)
            ) from exc
        raise
    return final


def _sweep_stale_temps(base_path: Path, session_id: str) -> None:
    """Remove this session's temp archives that a killed stop left behind. A temp still being
    written (another process stopping the same session) keeps a fresh mtime and is kept."""
    pattern = re.compile(re.escape(f".{session_id}.") + r"[a-z0-9_]{8}\.tmp")
    cutoff = time.time() - STALE_TEMP_S
    with contextlib.suppress(OSError), os.scandir(base_path) as it:
        for entry in it:
            if not pattern.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                    os.unlink(entry.path)
                    logger.warning("snapshot: removed %s left by an interrupted stop", entry.name)


async def take_snapshot(session: SandboxSession, spec: LocalSnapshotSpec) -> Path:
    """Archive the session's workspace according to ``spec``."""
    return await asyncio.to_thread(write_snapshot, session.root, session.session_id, spec)


# -- restoring ----------------------------------------------------------------------------------


def _corrupt(path: Path, why: str) -> SandboxStateError:
    return SandboxStateError(
        f"the snapshot {path} cannot be restored: {why}; resume from another state or create a "
        "new session",
        operation="resume",
        path=str(path),
    )


def _check_member_name(name: str) -> str:
    normalized = os.path.normpath(name)
    if os.path.isabs(name) or normalized == ".." or normalized.startswith("../") or not name:
        raise ValueError(f"member {name!r} leads outside the workspace")
    return normalized


def _first_filter(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo | None:
    """``tarfile``'s ``data`` filter as the first line of defence: a member it refuses for
    its name is an error; a link it refuses, a special file or a hard link is skipped."""
    try:
        tarfile.data_filter(member, str(dest))
    except (tarfile.AbsolutePathError, tarfile.OutsideDestinationError) as exc:
        raise ValueError(f"member {member.name!r} leads outside the workspace") from exc
    except tarfile.FilterError as exc:
        logger.warning("restore: skipping %s: %s", member.name, exc)
        return None
    if member.issym() or member.isdir() or member.isreg():
        return member
    logger.warning("restore: skipping %s: unsupported member type", member.name)
    return None


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Directories and files first, symlinks last, every one placed through the host-fs
    layer with no symlink followed (a member below a link is refused); then every link is
    resolved through what was placed, and one that ends outside the workspace is removed."""
    dirs: list[tuple[str, tarfile.TarInfo]] = []
    links: list[tuple[str, tarfile.TarInfo]] = []
    with no_symlinks():
        for member in tar:
            name = _check_member_name(member.name)
            if name == "." or _first_filter(member, dest) is None:
                continue
            if member.issym():
                links.append((name, member))
            elif member.isdir():
                _hostfs.mkdir(dest, name, parents=True)
                dirs.append((name, member))
            else:
                source = tar.extractfile(member)
                if source is None:
                    raise ValueError(f"member {member.name!r} has no data")
                with source:
                    _hostfs.write_new_file(
                        dest, name, source, mode=member.mode & _MODE_MASK, mtime=member.mtime
                    )
        placed = []
        for name, member in links:
            if not _link_inside(name, member.linkname):
                logger.warning("restore: skipping symlink %s: it points outside", name)
                continue
            try:
                _hostfs.symlink(dest, name, member.linkname, mtime=member.mtime)
            except SandboxError as exc:
                logger.warning("restore: skipping symlink %s: %s", name, exc)
                continue
            placed.append(name)
    _drop_escaping_links(dest, placed)
    with no_symlinks():
        for name, member in sorted(dirs, key=lambda d: d[0].count("/"), reverse=True):
            _hostfs.set_mode_and_mtime(dest, name, member.mode & _MODE_MASK, member.mtime)


def _drop_escaping_links(dest: Path, placed: list[str]) -> None:
    """Remove every restored symlink that, resolved through the links now in place (as the
    kernel would), ends outside ``dest``; again until none does (a link removed can change
    what another one resolves to)."""
    remaining = list(placed)
    while True:
        escaping = [name for name in remaining if not _hostfs.stays_inside(dest, name)]
        if not escaping:
            return
        for name in escaping:
            logger.warning("restore: removing symlink %s: it resolves outside", name)
            with no_symlinks():
                _hostfs.remove(dest, name)
            remaining.remove(name)


def _link_inside(name: str, linkname: str) -> bool:
    if os.path.isabs(linkname):
        return False
    resolved = os.path.normpath(os.path.join(os.path.dirname(name), linkname))
    return resolved != ".." and not resolved.startswith("../")


def restore_snapshot(spec: LocalSnapshotSpec, session_id: str, dest: Path | None = None) -> Path:
    """Restore the snapshot of ``session_id`` into ``dest`` (an empty directory, removed on
    failure) or a fresh workspace, and return its real path (blocking). Missing, corrupt or
    tampered snapshots raise ``SandboxStateError``."""
    path = spec.path_for(session_id)
    spec.download(session_id)
    if not path.is_file():
        raise _corrupt(path, "it does not exist (was the session stopped after it was created?)")
    dest = Path(tempfile.mkdtemp(prefix=WORKSPACE_PREFIX)).resolve() if dest is None else dest
    try:
        with tarfile.open(path, mode="r:") as tar:
            fmt = tar.pax_headers.get("sandmem.snapshot_format")
            if fmt != SNAPSHOT_FORMAT:
                raise ValueError(f"unknown snapshot format {fmt!r}, expected {SNAPSHOT_FORMAT!r}")
            _extract(tar, dest)
    except (tarfile.TarError, OSError, ValueError, EOFError, SandboxPathError) as exc:
        remove_tree(dest)
        raise _corrupt(path, str(exc)) from exc
    except BaseException:
        remove_tree(dest)
        raise
    return dest


def delete_snapshot(spec: LocalSnapshotSpec, session_id: str) -> None:
    try:
        spec.delete_remote(session_id)
    except Exception:  # the local files go regardless; a remote copy left is only storage
        logger.warning("could not delete the remote snapshot of %s", session_id, exc_info=True)
    with contextlib.suppress(OSError):
        spec.path_for(session_id).unlink()
    with contextlib.suppress(OSError):
        spec.live_lock_for(session_id).unlink()


# -- resuming into the state's root -------------------------------------------------------------


def acquire_live_lock(spec: LocalSnapshotSpec, session_id: str) -> int | None:
    """Mark the session's root as in use until the returned descriptor is closed; ``None``
    when that is not possible (another live session holds it, or the directory is not
    writable): the mark only steers where a later resume restores to."""
    try:
        spec.base_path.mkdir(parents=True, exist_ok=True)
        fd = os.open(spec.live_lock_for(session_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def release_live_lock(spec: LocalSnapshotSpec, session_id: str, fd: int) -> None:
    """Undo ``acquire_live_lock`` (the lock file is removed, then released)."""
    with contextlib.suppress(OSError):
        spec.live_lock_for(session_id).unlink()
    os.close(fd)


def _root_in_use(spec: LocalSnapshotSpec, session_id: str) -> bool:
    fd = None
    try:
        fd = os.open(spec.live_lock_for(session_id), os.O_RDWR | os.O_CLOEXEC)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    finally:
        if fd is not None:
            os.close(fd)  # releases the probe's lock
    return False


def restore_into_root(spec: LocalSnapshotSpec, session_id: str, root: Path | None) -> Path | None:
    """Restore the snapshot into ``root`` (the state's workspace) when it is free and return
    its real path; ``None`` when it is not free (the caller then restores into a fresh
    workspace). Blocking.

    "Free" means no running session of this ``session_id`` holds it (see
    ``acquire_live_lock``). The snapshot is extracted into a sibling directory first and then
    swapped in, so a failed restore leaves ``root`` as it was.
    """
    if root is None or _root_in_use(spec, session_id):
        return None
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.resume-"))
    except OSError as exc:
        logger.warning("resume: cannot restore into %s (%s); using a fresh workspace", root, exc)
        return None
    restore_snapshot(spec, session_id, dest=staging)
    old = root.with_name(f"{staging.name}.old")
    try:
        if root.exists() or root.is_symlink():
            os.rename(root, old)
        os.rename(staging, root)
    except OSError as exc:
        logger.warning("resume: cannot replace %s (%s); using a fresh workspace", root, exc)
        if old.exists() and not root.exists():
            with contextlib.suppress(OSError):
                os.rename(old, root)
        remove_tree(staging)
        return None
    if old.exists() or old.is_symlink():
        remove_tree(old)
    return root.resolve()
