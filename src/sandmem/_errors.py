"""The one exception tree of sandmem.

    SandmemError
    ├── UserError                 misuse by the developer calling sandmem
    │   └── CapabilityNotBoundError   a capability used before ``bind(session)`` (also ValueError)
    ├── MaxTurnsExceeded          a run hit its turn limit (carries the partial items)
    ├── ModelBehaviorError        the model answered with something unusable
    │   └── RepeatedToolCallError     the same failing tool call, again and again (ends the run)
    ├── ModelRequestError         a model request failed after the client's retries
    ├── ToolTimeoutError          a function tool ran past its ``timeout`` (``raise_exception``)
    ├── MCPServerError            an agent's MCP server could not be reached or failed a request
    ├── SandboxError              a sandbox operation failed (operation, path, cause)
    │   ├── SandboxPathError      a path leaves the workspace (also a UserError)
    │   ├── SandboxStateError     a session state or snapshot cannot be used (also a UserError)
    │   │   └── WorkspaceRootNotFoundError   the workspace directory is gone
    │   ├── ExecFailureError      a command could not be run to completion
    │   │   ├── ExecTimeoutError      it was killed at its timeout (``result`` holds the output)
    │   │   └── ExecTransportError    it could not be started
    │   ├── WorkspaceIOError      a file operation of the session API failed
    │   │   ├── WorkspaceReadNotFoundError   read of a missing file (also FileNotFoundError)
    │   │   ├── WorkspaceArchiveReadError    any other failed read
    │   │   ├── WorkspaceArchiveWriteError   a failed write or rm
    │   │   └── WorkspaceWriteTypeError      write got data it cannot write (also UserError)
    │   ├── ArtifactError         a manifest entry could not be materialised
    │   │   ├── LocalFileReadError / LocalDirReadError   a LocalFile / LocalDir source
    │   │   └── GitCloneError     a GitRepo entry could not be cloned
    │   └── MemoryLockedError     another process holds a memory layout's lock
    ├── MemoryNotFoundError       no memory, conversation or file where asked (also a UserError)
    └── MemoryGenerationError     memory generation failed for a rollout or a layout

Backend and client exceptions are translated into this tree at one boundary each: the model
adapters (``sandmem.models``) and the sandbox backends (``sandmem.sandboxes``). The sandbox
classes named like the reference SDK's (``ExecTimeoutError``, ``WorkspaceReadNotFoundError``, ...)
are raised by the public session API, so code written for the reference catches what it expects.
"""

from __future__ import annotations

from typing import Any


class SandmemError(Exception):
    """Base of every error raised by sandmem."""


class UserError(SandmemError):
    """The developer used sandmem in a way it does not support; the message says how to fix it."""


class CapabilityNotBoundError(UserError, ValueError):
    """A capability was asked for its instructions before it was bound to a sandbox session."""


class MaxTurnsExceeded(SandmemError):
    """A run reached ``max_turns`` without a final answer.

    ``items`` holds the items the run produced before it stopped.
    """

    def __init__(self, message: str, *, items: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.items: list[dict[str, Any]] = list(items or [])


class ModelBehaviorError(SandmemError):
    """The model's answer could not be used (e.g. invalid structured output)."""


class RepeatedToolCallError(ModelBehaviorError):
    """The model sent the same tool call (same tool, same arguments) and it failed the same
    way ``times`` times in one run: the run stops instead of spending its turn budget on it
    (``RunConfig.max_repeated_tool_failures``). ``items`` holds the items the run produced;
    ``tool_name``, ``arguments`` and ``last_error`` say which call."""

    def __init__(
        self,
        message: str,
        *,
        tool_name: str,
        arguments: str,
        times: int,
        last_error: str,
        items: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.arguments = arguments
        self.times = times
        self.last_error = last_error
        self.items: list[dict[str, Any]] = list(items or [])


class ToolTimeoutError(SandmemError):
    """A function tool ran longer than its ``timeout`` (with ``timeout_behavior="raise_exception"``;
    by default the model gets a tool output saying so instead)."""

    def __init__(self, tool_name: str, timeout_seconds: float) -> None:
        self.tool_name = tool_name
        self.timeout_seconds = timeout_seconds
        super().__init__(f"Tool '{tool_name}' timed out after {timeout_seconds:g} seconds.")


class MCPServerError(SandmemError):
    """An MCP server of an agent (``Agent(mcp_servers=...)``) could not be started or reached,
    or failed a request. ``server`` names it; the transport's exception is ``__cause__``."""

    def __init__(self, message: str, *, server: str | None = None) -> None:
        super().__init__(message)
        self.server = server


class ModelRequestError(SandmemError):
    """A model request failed after the client's own retries.

    ``status_code`` is the HTTP status when there was one; ``retryable`` says whether trying
    again later may succeed; ``retry_after`` is the wait the server asked for (seconds);
    ``network_error`` and ``timeout`` say the server was not reached or did not answer in time.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        network_error: bool = False,
        timeout: bool = False,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.network_error = network_error
        self.timeout = timeout


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


# -- sandbox errors under the reference SDK's names --------------------------------------------


class ExecFailureError(SandboxError):
    """A command run through ``session.exec`` could not be run to completion."""


class ExecTimeoutError(ExecFailureError):
    """The command was killed at its timeout. ``timeout_s`` is the limit and ``result`` the
    ``ExecResult`` with the output captured before the kill (``timed_out=True``)."""

    def __init__(
        self,
        message: str,
        *,
        command: str | None = None,
        timeout_s: float | None = None,
        result: Any = None,
    ) -> None:
        super().__init__(message, operation="exec", command=command, exit_code=124)
        self.timeout_s = timeout_s
        self.result = result


class ExecTransportError(ExecFailureError):
    """The command could not be started (missing program, bad working directory, ...)."""


class WorkspaceIOError(SandboxError):
    """A file operation of the public session API failed."""


class WorkspaceReadNotFoundError(WorkspaceIOError, FileNotFoundError):
    """``session.read`` of a file that does not exist."""


class WorkspaceArchiveReadError(WorkspaceIOError):
    """``session.read`` failed for another reason than a missing file."""


class WorkspaceArchiveWriteError(WorkspaceIOError):
    """``session.write`` (or ``rm``) failed on the host."""


class WorkspaceWriteTypeError(WorkspaceIOError, UserError):
    """``session.write`` was given data that is not bytes, str or a readable file object."""


class WorkspaceRootNotFoundError(SandboxStateError):
    """The session's workspace directory no longer exists."""


class ArtifactError(SandboxError):
    """A manifest entry could not be materialised into the workspace."""


class LocalFileReadError(ArtifactError):
    """The source of a ``LocalFile`` entry cannot be read (missing, not a regular file, ...)."""


class LocalDirReadError(ArtifactError):
    """The source of a ``LocalDir`` entry cannot be read (missing, not a directory, ...)."""


class GitCloneError(ArtifactError):
    """``git`` could not clone a ``GitRepo`` entry (``stderr`` holds git's message)."""

    def __init__(self, message: str, *, url: str, ref: str | None, stderr: str = "") -> None:
        super().__init__(message, operation="manifest", command="git clone")
        self.url = url
        self.ref = ref
        self.stderr = stderr
