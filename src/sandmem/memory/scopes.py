"""Memory scopes: which layouts a person's agent reads and writes, and the rules between them.

A *scope* is a memory layout with a name and a mode (``docs/scopes.md``):

```text
project   <project>/memories, <project>/sessions   the repository the agent works in
personal  $SANDMEM_HOME/personal/...               the person's preferences and habits
<name>    a path or an s3:// store named in a       a team's shared memory (often read-only)
          settings file
```

Each scope is a whole layout (its own history, index, forgetting and redaction); nothing
here reads or writes one. This module holds the rules, as small functions:

- where the personal scope lives (``sandmem_home``) and what makes a directory a project
  (``find_project``: a marker such as ``.git`` in it or a parent, never the home directory
  or ``/``);
- the settings (``ScopeSettings``: the user's ``$SANDMEM_HOME/config.toml`` and a
  workspace's ``sandmem.toml``, both ``[scopes]``), parsed once into typed values; a scope
  a workspace's file names is attached only when it lies inside the project, and read-only
  whatever it asks (a cloned repository must not make the agent read another project's
  memory, or write anywhere);
- which scope a write goes to (``route``), and how the attached scopes share the summary
  budget (``share_budget``, ``scoped_summary``).
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from sandmem._errors import UserError
from sandmem._prompts import escape_fence, load_prompt, render_prompt
from sandmem._toml_file import read_toml
from sandmem._truncate import estimate_tokens, truncate_head_tail
from sandmem.memory._git import DRIVER, DRIVER_COMMAND, merge_texts
from sandmem.memory.config import MemoryLayoutConfig

__all__ = [
    "DEFAULT_MARKERS",
    "DRIVER",
    "DRIVER_COMMAND",
    "PERSONAL",
    "PROJECT",
    "Scope",
    "ScopeSettings",
    "WriteKind",
    "attached_scopes",
    "ensure_home",
    "find_project",
    "load_settings",
    "merge_texts",
    "never_projects",
    "personal_scope",
    "route",
    "sandmem_home",
    "scoped_summary",
    "share_budget",
]

PROJECT = "project"
PERSONAL = "personal"
#: what makes a directory a project when no setting says otherwise
DEFAULT_MARKERS = (".git",)
#: the user's settings file, in ``sandmem_home()``
USER_SETTINGS = "config.toml"
#: a workspace's settings file (the one ``sandmem.toml`` of ``[memory] model``)
WORKSPACE_SETTINGS = "sandmem.toml"
#: a scope's name: short, lower case, usable in a label and a URI
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
#: names a named scope may not take: the built-in scopes and the memory directory's folders
#: (a resource URI is ``memory://<scope>/<file>``)
RESERVED = frozenset({PROJECT, PERSONAL, "rollout_summaries", "skills", "raw_memories"})

ScopeKind = Literal["project", "personal", "named"]
Mode = Literal["read-write", "read-only"]
#: what is written: a person's preference or habit, or anything about the work
WriteKind = Literal["preference", "fact", "procedure", "note", "edit"]


@dataclass(frozen=True)
class Scope:
    """One attached memory: a layout in ``root`` with a name, a kind and a mode. A scope in
    a memory store has its ``store`` URL (``s3://bucket/prefix``, at ``endpoint_url``); its
    ``root`` is then sandmem's private local copy of the store's layout (``store_copy``)."""

    name: str
    kind: ScopeKind
    root: Path
    writable: bool
    layout: MemoryLayoutConfig = field(default_factory=MemoryLayoutConfig)
    store: str | None = None
    endpoint_url: str | None = None

    @property
    def mode(self) -> Mode:
        return "read-write" if self.writable else "read-only"

    def label(self) -> str:
        """How hits and summary sections name the scope: ``[project]``, ``[personal]``."""
        return f"[{self.name}]"

    def read_only(self) -> Scope:
        return replace(self, writable=False)

    def where(self) -> str:
        """Where the scope's memory is: its directory, or its store's URL."""
        return self.store or str(self.root)


# ---------------------------------------------------------------- where things are


def sandmem_home(env: Mapping[str, str] | None = None) -> Path:
    """The directory of the user's sandmem data: ``$SANDMEM_HOME``, else the platform's data
    directory (``$XDG_DATA_HOME/sandmem``, ``~/.local/share/sandmem``; on macOS
    ``~/Library/Application Support/sandmem``; on Windows ``%LOCALAPPDATA%\\sandmem``)."""
    env = os.environ if env is None else env
    given = env.get("SANDMEM_HOME", "").strip()
    if given:
        return Path(os.path.abspath(os.path.expanduser(given)))
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "sandmem"
    if sys.platform == "win32" and env.get("LOCALAPPDATA"):
        return Path(env["LOCALAPPDATA"]) / "sandmem"
    data = env.get("XDG_DATA_HOME", "").strip()
    base = Path(data) if data and os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "sandmem"


def ensure_home(home: Path) -> None:
    """Create the user's sandmem directory and the personal scope's directory in it when
    missing, readable by the user alone (personal memory holds what a person told their
    agents)."""
    for directory in (home, home / PERSONAL):
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o700, exist_ok=True)


def personal_scope(home: Path | None = None) -> Scope:
    """The personal scope: a layout in ``<home>/personal``, always read-write."""
    return Scope(PERSONAL, "personal", (home or sandmem_home()) / PERSONAL, True)


def never_projects(env: Mapping[str, str] | None = None) -> set[str]:
    """Directories that are never a project: ``/`` and the user's home (a home kept in git
    for its dotfiles must not make every directory under it one project)."""
    env = os.environ if env is None else env
    home = env.get("HOME") or os.path.expanduser("~")
    return {os.path.sep, os.path.realpath(home)} if home else {os.path.sep}


def find_project(
    start: str | os.PathLike[str],
    markers: Sequence[str] = DEFAULT_MARKERS,
    *,
    layout: MemoryLayoutConfig | None = None,
) -> Path | None:
    """The project ``start`` is in: the nearest directory from ``start`` up that holds one of
    ``markers`` (``.git`` by default) or already holds the memory layout (its memories or
    sessions directory); never ``/`` or the home directory. ``None`` when there is none or
    ``start`` is not an existing absolute directory."""
    raw = os.fspath(start)
    if not raw or "\x00" in raw or not os.path.isabs(raw):
        return None
    here = os.path.realpath(raw)
    if not os.path.isdir(here):
        return None
    layout = layout or MemoryLayoutConfig()
    names = [*markers, layout.memories_dir, layout.sessions_dir]
    stops = never_projects()
    while here not in stops:
        if any(os.path.lexists(os.path.join(here, name)) for name in names):
            return Path(here)
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    return None


# ---------------------------------------------------------------- settings


#: a store URL a named scope may give: ``s3://bucket[/prefix]`` (S3 bucket name rules)
_STORE_URL = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._/-]{0,1000})?$")
_ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?/?$")


class NamedScope(BaseModel):
    """A scope a settings file adds: ``[scopes.named.<name>]`` with either ``path = "..."``
    (a directory) or ``store = "s3://bucket/prefix"`` (and optionally ``endpoint_url``), and
    ``mode = "read-only" | "read-write"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    store: Annotated[str, Field(min_length=1, max_length=1100)] | None = None
    endpoint_url: Annotated[str, Field(min_length=1, max_length=512)] | None = None
    mode: Mode = "read-only"

    @field_validator("path")
    @classmethod
    def _plain(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "\x00" in value or any(ord(c) < 32 for c in value):
            raise ValueError("a scope's path must be a plain path (no control characters)")
        if value.startswith("s3://"):
            raise ValueError(f"a store is named with store = {value!r}, not path")
        return value

    @field_validator("store")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and (not _STORE_URL.match(value) or "//" in value[5:]):
            raise ValueError(
                f"a store is s3://bucket/prefix (bucket: 3-63 lower-case letters, digits, "
                f"'.' or '-'; prefix: letters, digits, '.', '_', '-', '/'), not {value[:200]!r}"
            )
        return value.rstrip("/") if value is not None else None

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not _ENDPOINT.match(value):
            raise ValueError(f"endpoint_url is http(s)://host[:port], not {value[:200]!r}")
        return value

    @model_validator(mode="after")
    def _one_place(self) -> NamedScope:
        if (self.path is None) == (self.store is None):
            raise ValueError("give either path (a directory) or store (s3://bucket/prefix)")
        if self.endpoint_url is not None and self.store is None:
            raise ValueError("endpoint_url goes with store")
        return self


class ScopeSettings(BaseModel):
    """The ``[scopes]`` table of the settings files, typed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: attach the personal scope
    personal: StrictBool = True
    #: what makes a directory a project (a file or directory name in it)
    project_markers: tuple[Annotated[str, Field(min_length=1, max_length=255)], ...] = (
        DEFAULT_MARKERS
    )
    named: dict[str, NamedScope] = Field(default_factory=dict)

    @field_validator("project_markers")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if "/" in name or name in (".", "..") or "\x00" in name:
                raise ValueError(f"a project marker is a file or directory name, not {name!r}")
        return value

    @field_validator("named")
    @classmethod
    def _scope_names(cls, value: dict[str, NamedScope]) -> dict[str, NamedScope]:
        for name in value:
            if not _NAME.match(name) or name in RESERVED:
                raise ValueError(
                    f"scope name {name!r}: use 1-32 lower-case letters, digits, '-' or '_', "
                    f"starting with a letter, and none of {', '.join(sorted(RESERVED))}"
                )
        return value

    def scopes(self, base: Path, *, trusted: bool, home: Path | None = None) -> list[Scope]:
        """The named scopes, their paths resolved against ``base``; read-only unless the
        settings are ``trusted`` (the user's own file). A scope in a store is taken from
        trusted settings only (its local copy is in ``home``, default ``base``)."""
        found = []
        for name, named in self.named.items():
            writable = trusted and named.mode == "read-write"
            if named.store is not None:
                if trusted:
                    copy = store_copy(home or base, named.store, named.endpoint_url)
                    found.append(
                        Scope(
                            name,
                            "named",
                            copy,
                            writable,
                            MemoryLayoutConfig(),
                            named.store,
                            named.endpoint_url,
                        )
                    )
                continue
            path = Path(os.path.expanduser(named.path or ""))
            root = Path(os.path.abspath(base / path))
            found.append(Scope(name, "named", root, writable))
        return found


def ensure_store_copy(root: Path) -> None:
    """Create a store scope's local copy directory (``store_copy``, in the user's own sandmem
    directory) when missing, readable by the user alone."""
    os.makedirs(root, mode=0o700, exist_ok=True)


def store_copy(home: Path, url: str, endpoint_url: str | None) -> Path:
    """The directory of sandmem's private local copy of a store scope's layout:
    ``<home>/cache/stores/<digest of the URL and endpoint>``."""
    key = hashlib.sha256(f"{url}\x00{endpoint_url or ''}".encode()).hexdigest()[:32]
    return home / "cache" / "stores" / key


def read_settings_file(path: Path) -> dict[str, Any] | None:
    """The ``[scopes]`` table of a TOML file, or ``None`` when the file does not exist. Read
    as untrusted (``_toml_file.read_toml``: no link followed, 64 KiB; ``UserError``)."""
    document = read_toml(path)
    if document is None:
        return None
    table = document.get("scopes", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: [scopes] must be a table")
    return table


def parse_settings(table: dict[str, Any] | None, where: Path) -> ScopeSettings:
    try:
        return ScopeSettings.model_validate(table or {})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'scopes'}: {e['msg']}" for e in exc.errors()
        )
        raise UserError(f"{where}: [scopes] {problems}") from None


def load_settings(home: Path | None = None) -> ScopeSettings:
    """The user's scope settings (``<home>/config.toml``; defaults when it is missing)."""
    path = (home or sandmem_home()) / USER_SETTINGS
    return parse_settings(read_settings_file(path), path)


def attached_scopes(
    project: Path | None,
    *,
    home: Path | None = None,
    settings: ScopeSettings | None = None,
    layout: MemoryLayoutConfig | None = None,
    workspace_settings: bool = True,
) -> list[Scope]:
    """The scopes attached for a project (``None``: no project): the project, the personal
    scope (unless the settings turn it off), the user's named scopes, then the project's
    ``sandmem.toml`` named scopes (read-only; not with ``workspace_settings=False``). A scope
    whose directory is another's is attached once, read-only if either is; a name used twice
    keeps the first."""
    home = home or sandmem_home()
    settings = settings or load_settings(home)
    found: list[Scope] = []
    if project is not None:
        found.append(Scope(PROJECT, "project", project, True, layout or MemoryLayoutConfig()))
    if settings.personal:
        found.append(personal_scope(home))
    found += settings.scopes(home, trusted=True, home=home)
    if project is not None and workspace_settings:
        path = project / WORKSPACE_SETTINGS
        local = parse_settings(read_settings_file(path), path)
        found += [s for s in local.scopes(project, trusted=False) if _inside(s.root, project)]
    return _dedupe(found)


def _inside(path: Path, directory: Path) -> bool:
    """Whether ``path`` is ``directory`` or below it, links resolved: a project's own settings
    may attach only memories kept inside the project (a cloned repository must not make the
    agent read another project's memory)."""
    real, top = os.path.realpath(path), os.path.realpath(directory)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def _dedupe(scopes: list[Scope]) -> list[Scope]:
    kept: list[Scope] = []
    for scope in scopes:
        same = next(
            (
                i
                for i, k in enumerate(kept)
                if k.name == scope.name or _same_dir(k.root, scope.root)
            ),
            None,
        )
        if same is None:
            kept.append(scope)
        elif not scope.writable and _same_dir(kept[same].root, scope.root):
            kept[same] = kept[same].read_only()  # read-only wins over read-write
    return kept


def _same_dir(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


# ---------------------------------------------------------------- writing


def route(kind: WriteKind, requested: str | None, scopes: Sequence[Scope]) -> Scope:
    """The scope a write goes to: the one the caller named; else a ``preference`` to the
    personal scope and anything else (a fact, a procedure, a note, an edit of ``MEMORY.md``)
    to the project. ``UserError`` when that scope is not attached or is read-only (nothing
    is ever written to a read-only scope, and a write never falls back to another scope)."""
    by_name = {s.name: s for s in scopes}
    name = requested or (PERSONAL if kind == "preference" else PROJECT)
    scope = by_name.get(name)
    if scope is None:
        attached = ", ".join(by_name) or "none"
        if name == PROJECT:
            raise UserError(
                "no project memory is attached here (the directory is not a project: no "
                f"marker such as .git); attached scopes: {attached}. Name scope='personal' "
                "for something about the person, or work in a project"
            )
        raise UserError(f"there is no scope {name!r}; attached scopes: {attached}")
    if not scope.writable:
        raise UserError(
            f"scope {name!r} is attached read-only ({scope.where()}): nothing is written to it; "
            f"name another scope ({', '.join(s.name for s in scopes if s.writable) or 'none'})"
        )
    return scope


# ---------------------------------------------------------------- reading


def share_budget(sizes: Sequence[int], budget: int) -> list[int]:
    """How many of ``budget`` tokens each summary gets, in attachment order: the budget is
    shared equally, and what a short summary leaves of its share goes to the longer ones
    (every summary gets ``min(size, level)`` for the highest level the budget allows; the
    tokens left below the next level go one each to the longer summaries, first attached
    first). A summary never gets more than it needs, and the shares never add up to more than
    ``budget``."""
    if budget < 0 or any(s < 0 for s in sizes):
        raise ValueError("sizes and budget must not be negative")
    low, high = 0, max(sizes, default=0)
    while low < high:  # the highest level whose shares fit the budget
        mid = (low + high + 1) // 2
        if sum(min(size, mid) for size in sizes) <= budget:
            low = mid
        else:
            high = mid - 1
    given = [min(size, low) for size in sizes]
    left = budget - sum(given)
    for i, size in enumerate(sizes):
        if left <= 0:
            break
        if size > given[i]:
            given[i] += 1
            left -= 1
    return given


def scoped_summary(sections: Sequence[tuple[Scope, str]], budget_tokens: int) -> str:
    """The summaries of the attached scopes as one text: a heading per scope naming it, its
    mode and its directory, each summary cut to its share of ``budget_tokens``
    (``share_budget``, head and tail kept), and a first line saying that the project wins
    where scopes disagree. Scopes with an empty summary are left out; ``""`` when all are.
    The opening line and the headings count against the budget too, so the whole text stays
    within ``budget_tokens`` (a reader that cuts at the same budget never cuts it again)."""
    kept = [(scope, text.strip()) for scope, text in sections if text.strip()]
    if not kept:
        return ""
    opening = render_prompt(
        load_prompt("sandmem.memory", "scopes"),
        scopes=", ".join(f"`{scope.name}` ({scope.mode})" for scope, _ in kept),
    ).strip()
    headings = [
        f"### {scope.label()} {scope.kind} memory ({scope.mode}, {scope.where()})\n\n"
        for scope, _ in kept
    ]
    overhead = estimate_tokens(opening + "\n\n" * len(kept) + "".join(headings)) + len(kept)
    sizes = [estimate_tokens(escape_fence(text, "memory_summary")) for _, text in kept]
    shares = share_budget(sizes, max(budget_tokens - overhead, 0))
    parts = [opening]
    for (scope, text), heading, share in zip(kept, headings, shares, strict=True):
        body = escape_fence(text, "memory_summary")
        body = truncate_head_tail(body, max(share, 1), what=f"{scope.name} memory summary")
        parts.append(heading + body)
    return "\n\n".join(parts)
