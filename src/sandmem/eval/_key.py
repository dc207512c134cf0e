"""What decides a cell's result, as a key: a finished cell is reused only under the same key.

A cell (task, condition, repeat) is the agent model's work on a task's files under the suite's
instructions and limits, with memory made by a memory engine or model, through one server. A
cell made under any other of these is a different measurement: it is never loaded in its
place (``sandmem eval`` then ``sandmem eval --model other`` in the same ``--out`` runs every
cell again instead of reporting the first eval's numbers under the second's name).

The key is stored in each cell file and its digest is part of the file name, so cells of
different settings can sit side by side in ``out/cells/``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from sandmem.eval._suite import Condition, Suite, Task

#: the memory engine of the ``scripted`` agent (no model)
EXTRACTIVE = "extractive"


class Settings(BaseModel):
    """What an eval ran with, as its report states it (the cell keys are derived from it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the agent's model, or ``scripted``
    agent_model: str
    #: both memory phases' model, or ``extractive`` (the engine)
    memory: str
    #: the model server's base URL, ``None`` for the scripted agent (no server)
    server: str | None
    #: ``responses`` or ``chat_completions``; ``None`` without a server
    api: str | None
    backend: str
    max_turns: int
    #: the cap on each agent request's output tokens (``None``: the scripted agent, no requests)
    max_tokens: int | None
    #: for ``scripted``: whether the policy looks at memory (tests use False as a control)
    scripted_uses_memory: bool | None
    suite: str
    suite_digest: str
    #: task id -> digest of its definition and initial files
    task_digests: dict[str, str]


class CellKey(BaseModel):
    """Everything that decides one cell's result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent_model: str
    #: ``None`` in the conditions without memory (the memory model cannot change them)
    memory: str | None
    server: str | None
    api: str | None
    backend: str
    max_turns: int
    max_tokens: int | None
    scripted_uses_memory: bool | None
    suite_digest: str
    task_digest: str

    @property
    def digest(self) -> str:
        return _digest(self.model_dump(mode="json"))[:12]


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def suite_digest(suite: Suite) -> str:
    """What every task of ``suite`` shares: its instructions and turn limit."""
    return _digest({"instructions": suite.instructions, "max_turns": suite.max_turns})[:16]


def task_digest(suite: Suite, task: Task) -> str:
    """The task's definition (steps, checks, scripts, agents) and its initial files' bytes."""
    files = {
        name: hashlib.sha256(data).hexdigest()
        for name, data in sorted(suite.workspace_files(task).items())
    }
    return _digest({"task": task.model_dump(mode="json", by_alias=True), "files": files})[:16]


def cell_key(settings: Settings, task: str, condition: Condition) -> CellKey:
    return CellKey(
        agent_model=settings.agent_model,
        memory=settings.memory if condition == "memory" else None,
        server=settings.server,
        api=settings.api,
        backend=settings.backend,
        max_turns=settings.max_turns,
        max_tokens=settings.max_tokens,
        scripted_uses_memory=settings.scripted_uses_memory,
        suite_digest=settings.suite_digest,
        task_digest=settings.task_digests[task],
    )
