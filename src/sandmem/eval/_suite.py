"""Eval suites: a small TOML format, parsed into frozen pydantic models.

A suite is a list of tasks; a task is a workspace (inline ``files`` and/or a ``workspace``
directory next to the suite file) and an ordered list of steps. Each step is a prompt, a check
(a shell command run in the workspace: exit 0 means success), and optionally a user correction
given when the check fails, files written before the step runs (the world changing between
steps), the agent that runs it (for multi-agent tasks with separate memory layouts), and a
script for the offline ``scripted`` policy. ``docs/eval.md`` documents every field.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sandmem._errors import UserError
from sandmem.memory.config import MemoryLayoutConfig
from sandmem.sandboxes._manifest import normalize_entry_path

_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
BUILTIN = "builtin"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptAction(_Frozen):
    """One tool call of the scripted policy: a shell command or an ``apply_patch`` patch."""

    cmd: str | None = None
    patch: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> ScriptAction:
        if (self.cmd is None) == (self.patch is None):
            raise ValueError("a script action has exactly one of `cmd` or `patch`")
        return self


class StepScript(_Frozen):
    """What the offline scripted policy does for a step (ignored with a real model).

    Without the knowledge it runs ``explore`` then ``naive`` (or ``actions`` when there is no
    ``naive``); with it (``recall`` found in ``MEMORY.md`` by a memory-aware policy, or after
    the step's correction) it runs ``actions`` directly. ``verify`` always runs first: memory
    is guidance, the current workspace wins.
    """

    recall: str | None = None
    verify: list[ScriptAction] = Field(default_factory=list)
    explore: list[ScriptAction] = Field(default_factory=list)
    naive: list[ScriptAction] | None = None
    actions: list[ScriptAction] = Field(default_factory=list)
    answer: str = "Done."


class Step(_Frozen):
    prompt: str
    check: str
    correction: str | None = None
    agent: str = "default"
    before: dict[str, str] = Field(default_factory=dict)
    check_timeout_s: float = Field(default=60.0, gt=0)
    script: StepScript = Field(default_factory=StepScript)

    @field_validator("before")
    @classmethod
    def _inside(cls, files: dict[str, str]) -> dict[str, str]:
        return _workspace_files(files)


class AgentLayout(_Frozen):
    """A named agent of a multi-agent task and its memory layout."""

    memories_dir: str = "memories"
    sessions_dir: str = "sessions"
    instructions: str | None = None

    @model_validator(mode="after")
    def _layout(self) -> AgentLayout:
        """A layout ``MemoryLayoutConfig`` accepts (relative, no ``..``, separate)."""
        MemoryLayoutConfig(memories_dir=self.memories_dir, sessions_dir=self.sessions_dir)
        return self


class Task(_Frozen):
    id: str
    description: str = ""
    #: what the task exercises: bug-followup, discovered-command, correction, preference,
    #: dead-end, stale-memory, multi-agent, memory-irrelevant, or anything else
    kind: str = "other"
    files: dict[str, str] = Field(default_factory=dict)
    #: a directory whose files seed the workspace (relative to the suite file)
    workspace: str | None = None
    agents: dict[str, AgentLayout] = Field(default_factory=lambda: {"default": AgentLayout()})
    steps: list[Step] = Field(min_length=1, alias="step")

    @field_validator("files")
    @classmethod
    def _inside(cls, files: dict[str, str]) -> dict[str, str]:
        return _workspace_files(files)

    @model_validator(mode="after")
    def _check(self) -> Task:
        if not _ID.match(self.id):
            raise ValueError(f"task id {self.id!r} must match {_ID.pattern}")
        if self.workspace is not None and not _inside_suite(self.workspace):
            raise ValueError(
                f"task {self.id!r}: workspace {self.workspace!r} must be a relative path inside "
                "the suite's directory (no '..', not absolute)"
            )
        for index, step in enumerate(self.steps, 1):
            if step.agent not in self.agents:
                raise ValueError(
                    f"step {index} names agent {step.agent!r}, which [task.agents] does not define"
                )
        return self


Condition = Literal["memory", "no-memory", "full-history"]
CONDITIONS: tuple[Condition, ...] = ("memory", "no-memory", "full-history")


class Suite(_Frozen):
    name: str
    description: str = ""
    instructions: str = "You work in this workspace. Make small, correct changes and check them."
    max_turns: int = Field(default=30, ge=1)
    tasks: list[Task] = Field(min_length=1, alias="task")
    #: where the suite file lives (workspace directories are relative to it)
    base_dir: Path | None = None

    @model_validator(mode="after")
    def _unique(self) -> Suite:
        ids = [task.id for task in self.tasks]
        if len(ids) != len(set(ids)):
            raise ValueError("task ids must be unique")
        return self

    def workspace_files(self, task: Task) -> dict[str, bytes]:
        """The task's initial files: the ``workspace`` directory, then inline ``files``.

        The directory must resolve inside the suite's directory (a symlink leading out is
        refused); symlinks inside it are not followed (neither to files nor to directories),
        and only regular files are read."""
        files: dict[str, bytes] = {}
        if task.workspace is not None:
            base = (self.base_dir or Path.cwd()).resolve()
            root = (base / task.workspace).resolve()
            if root != base and base not in root.parents:
                raise UserError(
                    f"task {task.id!r}: workspace {task.workspace!r} leads outside the suite's "
                    f"directory {base}"
                )
            if not root.is_dir():
                raise UserError(f"task {task.id!r}: workspace {root} is not a directory")
            files.update(_regular_files(root))
        files.update({name: text.encode() for name, text in task.files.items()})
        return files


def _workspace_files(files: dict[str, str]) -> dict[str, str]:
    """Inline files by workspace-relative names (no ``..``, not absolute, no NUL)."""
    return {normalize_entry_path(name): text for name, text in files.items()}


def _inside_suite(path: str) -> bool:
    if not path or "\0" in path or "\\" in path or path.startswith(("/", "~")):
        return False
    return ".." not in PurePosixPath(path).parts


def _regular_files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` by its relative path; no symlink is followed."""
    found: dict[str, bytes] = {}
    for directory, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(directory, name)
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def parse_suite(text: str, *, base_dir: Path | None = None, source: str = "suite") -> Suite:
    """A suite from TOML text; any problem raises ``UserError`` naming ``source``."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{source} is not valid TOML: {exc}") from None
    try:
        return Suite.model_validate({**data, "base_dir": base_dir})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UserError(f"{source}: {where}: {first['msg']}") from None


def load_suite(suite: str | Path) -> Suite:
    """The built-in suite (``"builtin"``) or a suite file."""
    if str(suite) == BUILTIN:
        text = resources.files("sandmem.eval").joinpath("suites/builtin.toml").read_text()
        return parse_suite(text, source="the built-in suite")
    path = Path(suite)
    if not path.is_file():
        raise UserError(f"no suite file at {path}; pass a .toml suite or `builtin`")
    return parse_suite(path.read_text(), base_dir=path.parent, source=str(path))
