"""The one exception tree of sandmem.

    SandmemError
    ├── UserError                 misuse by the developer calling sandmem
    ├── MaxTurnsExceeded          a run hit its turn limit (carries the partial items)
    ├── ModelBehaviorError        the model answered with something unusable
    ├── ModelRequestError         a model request failed after the client's retries
    ├── SandboxError              a sandbox operation failed (operation, path, cause)
    │   ├── SandboxPathError      a path leaves the workspace (also a UserError)
    │   ├── SandboxStateError     a session state or snapshot cannot be used (also a UserError)
    │   └── MemoryLockedError     another process holds a memory layout's lock
    ├── MemoryNotFoundError       no memory, conversation or file where asked (also a UserError)
    └── MemoryGenerationError     memory generation failed for a rollout or a layout

Backend and client exceptions are translated into this tree at one boundary each: the model
adapters (``sandmem.models``) and the sandbox backends (``sandmem.sandboxes``).
"""

from __future__ import annotations

from typing import Any


class SandmemError(Exception):
    """Base of every error raised by sandmem."""


class UserError(SandmemError):
    """The developer used sandmem in a way it does not support; the message says how to fix it."""


class MaxTurnsExceeded(SandmemError):
    """A run reached ``max_turns`` without a final answer.

    ``items`` holds the items the run produced before it stopped.
    """

    def __init__(self, message: str, *, items: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.items: list[dict[str, Any]] = list(items or [])


class ModelBehaviorError(SandmemError):
    """The model's answer could not be used (e.g. invalid structured output)."""


class ModelRequestError(SandmemError):
    """A model request failed after the client's own retries.

    ``status_code`` is the HTTP status when there was one; ``retryable`` says whether trying
    again later may succeed.
    """

    def __init__(
        self, message: str, *, status_code: int | None = None, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class SandboxError(SandmemError):
    """A sandbox operation failed. Carries the ``operation``, the ``path`` or ``command``, and
    the ``exit_code`` when they apply; the original exception is ``__cause__``."""

    def __init__(
        self,
        message: str,
        *,
        operation: str | None = None,
        path: str | None = None,
        command: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.operation = operation
        self.path = path
        self.command = command
        self.exit_code = exit_code


class SandboxPathError(SandboxError, UserError):
    """A path given by a caller or a model is not inside the workspace."""


class SandboxStateError(SandboxError, UserError):
    """A session state, snapshot or workspace cannot be used to resume."""


class MemoryGenerationError(SandmemError):
    """Memory generation failed. ``rollout_id`` names the rollout when one phase-one
    extraction failed; ``retryable`` says whether the next flush may succeed."""

    def __init__(
        self, message: str, *, rollout_id: str | None = None, retryable: bool = True
    ) -> None:
        super().__init__(message)
        self.rollout_id = rollout_id
        self.retryable = retryable


class MemoryLockedError(SandboxError):
    """A memory layout's lock (``<memories_dir>/.lock`` or ``<sessions_dir>/.lock``) is held by
    another process or task (a generation or a ``forget`` in progress) past the lock timeout.
    ``path`` names the lock; trying again later may succeed."""

    retryable = True


class MemoryNotFoundError(UserError):
    """What was asked for is not in memory: no memory layout in the workspace, an unknown
    conversation (``rollout_id``), or a conversation with no such file yet. ``path`` names what
    was looked for."""

    def __init__(
        self, message: str, *, path: str | None = None, rollout_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.rollout_id = rollout_id
