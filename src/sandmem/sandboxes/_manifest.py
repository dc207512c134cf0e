"""Manifest: the initial contents of a workspace, as pydantic models that round-trip through JSON.

File contents are raw bytes in Python and base64 strings in JSON.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
)

from sandmem._errors import SandboxError, SandboxPathError
from sandmem.sandboxes import _hostfs


class File(BaseModel):
    """A file entry. ``content`` is bytes (a ``str`` is encoded as UTF-8); ``mode`` is the
    permission bits (e.g. ``0o755``), or ``None`` for the default given by the umask."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["file"] = "file"
    content: bytes = b""
    mode: int | None = Field(default=None, ge=0, le=0o7777)

    if TYPE_CHECKING:  # the signature type checkers see; at runtime pydantic's own __init__

        def __init__(
            self,
            *,
            type: Literal["file"] = "file",
            content: bytes | str = b"",
            mode: int | None = None,
        ) -> None: ...

    @field_validator("content", mode="before")
    @classmethod
    def _decode(cls, value: object, info: ValidationInfo) -> object:
        # JSON carries base64; in Python a str is text (pydantic's val_json_bytes would
        # base64-decode Python strings too)
        if isinstance(value, str):
            if info.mode == "json":
                try:
                    return base64.b64decode(value, validate=True)
                except binascii.Error as exc:
                    raise ValueError(f"file content is not valid base64: {exc}") from None
            return value.encode("utf-8")
        return value

    @field_serializer("content", when_used="json")
    def _encode(self, value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")


class Dir(BaseModel):
    """A directory entry (created with its parents; useful for empty directories)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["dir"] = "dir"


Entry = Annotated[File | Dir, Field(discriminator="type")]


def _check_env_name(name: str) -> str:
    if not name or "=" in name or "\x00" in name:
        raise ValueError(f"invalid environment variable name {name!r}")
    return name


def validate_env(env: dict[str, str]) -> dict[str, str]:
    for name, value in env.items():
        _check_env_name(name)
        if "\x00" in value:
            raise ValueError(f"environment variable {name!r} contains a NUL byte")
    return env


def normalize_entry_path(path: str) -> str:
    """Normalise a manifest entry path; refuse absolute paths and ``..`` components."""
    if not path or "\x00" in path:
        raise ValueError(f"manifest entry path {path!r} is empty or contains a NUL byte")
    if path.startswith("/"):
        raise ValueError(
            f"manifest entry path {path!r} is absolute; entries are workspace-relative "
            "(like 'notes/todo.md')"
        )
    if ".." in path.split("/"):
        raise ValueError(
            f"manifest entry path {path!r} contains '..'; entries are workspace-relative "
            "and stay inside the workspace"
        )
    normalized = posixpath.normpath(path)
    if normalized == ".":
        raise ValueError(f"manifest entry path {path!r} names the workspace root itself")
    return normalized


class Manifest(BaseModel):
    """Initial workspace contents.

    ``entries`` maps workspace-relative paths to ``File`` or ``Dir``. ``root`` is the workspace
    directory: leave it ``None`` and the client creates a fresh temporary directory; give it
    and that directory (created if missing) is the workspace: entries are written into it,
    existing files that are not entries are left alone. ``env`` is added to the environment of
    every command run in the session (it is stored in the session state JSON: no secrets you
    would not write to disk).

    The client never mutates the manifest you pass; the session's copy, with ``root`` filled
    in, is ``session.state.manifest``.
    """

    model_config = ConfigDict(extra="forbid")

    entries: dict[str, Entry] = Field(default_factory=dict)
    root: Path | None = None
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("entries")
    @classmethod
    def _check_entries(cls, entries: dict[str, File | Dir]) -> dict[str, File | Dir]:
        normalized: dict[str, File | Dir] = {}
        for path, entry in entries.items():
            key = normalize_entry_path(path)
            if key in normalized:
                raise ValueError(f"manifest entry path {path!r} is given twice")
            normalized[key] = entry
        return normalized

    @field_validator("root")
    @classmethod
    def _check_root(cls, root: Path | None) -> Path | None:
        if root is None:
            return None
        if "\x00" in str(root):
            raise ValueError("manifest root contains a NUL byte")
        return root.expanduser().absolute()

    @field_validator("env")
    @classmethod
    def _check_env(cls, env: dict[str, str]) -> dict[str, str]:
        return validate_env(env)


def write_entries(root: Path, entries: dict[str, File | Dir]) -> None:
    """Write manifest entries under ``root`` (blocking; parents first, paths checked; through
    the host-filesystem layer, so a symlink never redirects an entry)."""
    for rel in sorted(entries):
        entry = entries[rel]
        try:
            if isinstance(entry, Dir):
                _hostfs.mkdir(root, rel, parents=True)
            else:
                _hostfs.write_atomic(root, rel, entry.content, mode=entry.mode, durable=False)
        except SandboxPathError:
            raise
        except SandboxError as exc:
            cause = exc.__cause__
            why = cause.strerror if isinstance(cause, OSError) and cause.strerror else exc
            raise SandboxError(
                f"cannot write manifest entry {rel!r} into the workspace {root}: {why}",
                operation="manifest",
                path=rel,
            ) from cause
