"""Manifest: the initial contents of a workspace, as pydantic models that round-trip through JSON.

File contents are raw bytes in Python and base64 strings in JSON. Entries nest
(``Dir(children={...})``); ``_materialize.write_entries`` materialises them through the host
file layer.
"""

from __future__ import annotations

import base64
import binascii
import os
import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from sandmem.sandboxes._types import Permissions

#: ``Manifest(root=DEFAULT_ROOT)`` is the reference's default root: "a fresh workspace"
DEFAULT_ROOT = "/workspace"


def _permissions_to_mode(data: object) -> object:
    """``permissions=Permissions(...) | int`` (the reference's field) becomes ``mode``."""
    if isinstance(data, dict) and "permissions" in data:
        data = dict(data)
        value = data.pop("permissions")
        if value is not None:
            if isinstance(value, dict):
                value = Permissions.model_validate(value)
            if isinstance(value, Permissions):
                value = value.to_mode() & 0o7777
            if "mode" in data and data["mode"] is not None and data["mode"] != value:
                raise ValueError("give permissions or mode, not both")
            data["mode"] = value
    return data


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: permission bits (``0o755``), or ``None`` for the default given by the umask; also
    #: settable as ``permissions=Permissions(...)`` or an int
    mode: int | None = Field(default=None, ge=0, le=0o7777)

    @model_validator(mode="before")
    @classmethod
    def _permissions(cls, data: object) -> object:
        return _permissions_to_mode(data)

    @property
    def permissions(self) -> Permissions | None:
        return None if self.mode is None else Permissions.from_mode(self.mode)


class File(_Entry):
    """A file entry. ``content`` is bytes (a ``str`` is encoded as UTF-8); ``permissions``
    (or ``mode``) are its permission bits, default from the umask."""

    type: Literal["file"] = "file"
    content: bytes = b""

    if TYPE_CHECKING:  # the signature type checkers see; at runtime pydantic's own __init__

        def __init__(
            self,
            *,
            type: Literal["file"] = "file",
            content: bytes | str = b"",
            mode: int | None = None,
            permissions: Permissions | int | None = None,
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


class Dir(_Entry):
    """A directory (created with its parents) and, optionally, its ``children``: a mapping of
    relative paths to entries, nested as deep as you like."""

    type: Literal["dir"] = "dir"
    children: dict[str, Entry] = Field(default_factory=dict)

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            type: Literal["dir"] = "dir",
            children: dict[str, AnyEntry] | None = None,
            mode: int | None = None,
            permissions: Permissions | int | None = None,
        ) -> None: ...

    @field_validator("children", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("children")
    @classmethod
    def _check_children(cls, children: dict[str, AnyEntry]) -> dict[str, AnyEntry]:
        return _normalized_entries(children)


def _host_path(value: Path) -> Path:
    if "\x00" in str(value):
        raise ValueError("a source path contains a NUL byte")
    return value.expanduser().absolute()


class LocalFile(_Entry):
    """A copy of the host file ``src`` (made absolute against the current directory), taken
    when the workspace is created. ``src`` must be a regular file (a symlink given as ``src``
    is followed: you named it); its permission bits are kept unless ``permissions`` is given.
    """

    type: Literal["local_file"] = "local_file"
    src: Path

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            src: str | os.PathLike[str],
            type: Literal["local_file"] = "local_file",
            mode: int | None = None,
            permissions: Permissions | int | None = None,
        ) -> None: ...

    @field_validator("src")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return _host_path(value)


class LocalDir(_Entry):
    """A copy of the host directory ``src`` (an empty directory when ``src`` is ``None``),
    taken when the workspace is created. Nothing inside ``src`` is followed out of it: a
    symlink is copied only when it points inside ``src`` (else skipped with a warning);
    sockets, fifos and devices are skipped; setuid and setgid bits are dropped."""

    type: Literal["local_dir"] = "local_dir"
    src: Path | None = None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            src: str | os.PathLike[str] | None = None,
            type: Literal["local_dir"] = "local_dir",
            mode: int | None = None,
            permissions: Permissions | int | None = None,
        ) -> None: ...

    @field_validator("src")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return None if value is None else _host_path(value)


class GitRepo(_Entry):
    """A checkout of a git repository, cloned with the system ``git`` when the workspace is
    created. ``repo`` is ``owner/name`` on ``host`` (cloned from ``https://<host>/<repo>.git``),
    or a URL (``file:///...``, ``https://...``, ``git@...``) or a local path, used as is.
    ``ref`` is a branch, tag or commit (default: the remote's default branch); ``subpath``
    copies only that directory of the checkout. The copy includes ``.git`` unless ``subpath``
    is given."""

    type: Literal["git_repo"] = "git_repo"
    repo: str
    ref: str | None = None
    host: str = "github.com"
    subpath: str | None = None

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            repo: str,
            ref: str | None = None,
            host: str = "github.com",
            subpath: str | None = None,
            type: Literal["git_repo"] = "git_repo",
            mode: int | None = None,
            permissions: Permissions | int | None = None,
        ) -> None: ...

    @field_validator("repo", "host")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip() or "\x00" in value:
            raise ValueError("repo and host must be non-empty")
        return value.strip()

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or value.startswith("-")):
            raise ValueError(f"ref {value!r} is not a branch, tag or commit")
        return value

    @field_validator("subpath")
    @classmethod
    def _subpath(cls, value: str | None) -> str | None:
        if value is None or value.strip() in ("", "."):
            return None
        return normalize_entry_path(value.strip())

    @property
    def url(self) -> str:
        """What ``git clone`` is given."""
        looks_local = self.repo.startswith(("/", "./", "../", "~"))
        if "://" in self.repo or self.repo.startswith("git@") or looks_local:
            return os.path.expanduser(self.repo) if looks_local else self.repo
        return f"https://{self.host}/{self.repo.removesuffix('.git')}.git"


AnyEntry = File | Dir | LocalFile | LocalDir | GitRepo
Entry = Annotated[AnyEntry, Field(discriminator="type")]
Dir.model_rebuild()


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


def _normalized_entries(entries: dict[str, AnyEntry]) -> dict[str, AnyEntry]:
    normalized: dict[str, AnyEntry] = {}
    for path, entry in entries.items():
        key = normalize_entry_path(str(path))
        if key in normalized:
            raise ValueError(f"manifest entry path {path!r} is given twice")
        normalized[key] = entry
    return normalized


def _environment_mapping(value: object) -> object:
    """A plain mapping, the reference's ``Environment(value={...})`` or its dict form."""
    inner = getattr(value, "value", None)
    if not isinstance(value, dict) and isinstance(inner, dict):
        return inner
    if isinstance(value, dict) and set(value) == {"value"} and isinstance(value["value"], dict):
        return value["value"]
    return value


class Manifest(BaseModel):
    """Initial workspace contents.

    ``entries`` maps workspace-relative paths to entries (``File``, ``Dir`` with nested
    ``children``). ``root`` is the workspace directory: leave it ``None`` (or the reference's
    default ``"/workspace"``) and the client creates a fresh temporary directory; give another
    path and that directory (created if missing) is the workspace: entries are written into
    it, existing files that are not entries are left alone. ``environment`` (also accepted as
    ``env``) is added to the environment of every command run in the session (it is stored in
    the session state JSON: no secrets you would not write to disk).

    The client never mutates the manifest you pass; the session's copy, with ``root`` filled
    in, is ``session.state.manifest``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    entries: dict[str, Entry] = Field(default_factory=dict)
    root: Path | None = None
    environment: dict[str, str] = Field(
        default_factory=dict, validation_alias=AliasChoices("environment", "env")
    )

    if TYPE_CHECKING:

        def __init__(
            self,
            *,
            entries: dict[str, AnyEntry] | None = None,
            root: str | os.PathLike[str] | None = None,
            environment: object = None,
            env: dict[str, str] | None = None,
        ) -> None: ...

    @property
    def env(self) -> dict[str, str]:
        """sandmem's earlier name of ``environment``."""
        return self.environment

    @field_validator("entries", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return {} if value is None else value

    @field_validator("entries")
    @classmethod
    def _check_entries(cls, entries: dict[str, AnyEntry]) -> dict[str, AnyEntry]:
        return _normalized_entries(entries)

    @field_validator("root", mode="before")
    @classmethod
    def _default_root(cls, root: object) -> object:
        return None if isinstance(root, str | Path) and str(root) == DEFAULT_ROOT else root

    @field_validator("root")
    @classmethod
    def _check_root(cls, root: Path | None) -> Path | None:
        if root is None:
            return None
        if "\x00" in str(root):
            raise ValueError("manifest root contains a NUL byte")
        return root.expanduser().absolute()

    @field_validator("environment", mode="before")
    @classmethod
    def _unwrap_environment(cls, value: object) -> object:
        return {} if value is None else _environment_mapping(value)

    @field_validator("environment")
    @classmethod
    def _check_env(cls, env: dict[str, str]) -> dict[str, str]:
        return validate_env(env)
