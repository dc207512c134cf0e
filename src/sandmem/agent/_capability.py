"""The capability seam: a small unit that adds tools and instructions to a sandbox agent.

Two ways to write one, both supported:

- sandmem's: override ``tools()``, ``instructions(ctx)`` (the run context), and if needed
  ``on_run_start(ctx)`` / ``on_run_end(ctx, outcome)``; ``required_capability_types()``
  returns capability classes.
- the reference SDK's: declare fields as class annotations (``type: Literal["x"] = "x"``,
  ``greeting: str = "hi"``) and construct with keywords; ``bind(session)`` may store more state
  on ``self`` and return ``None``; ``instructions(manifest)`` takes the session's manifest;
  ``required_capability_types()`` returns capability type names (``{"shell"}``).

The runner uses ``bind_for_run``, ``missing_requirements`` and ``capability_instructions``,
which accept either form.
"""

from __future__ import annotations

import builtins
import copy
import inspect
import typing
from typing import TYPE_CHECKING, Any, ClassVar, Self

from sandmem._errors import UserError
from sandmem.sandboxes._workspace_scope import SandboxWorkspaceScope

if TYPE_CHECKING:
    from sandmem.agent._context import RunOutcome, SandboxRunContext
    from sandmem.agent._tools import FunctionTool
    from sandmem.sandboxes._session import SandboxSession

_MISSING: Any = object()


def _field_default(cls: type, name: str) -> Any:
    default = getattr(cls, name, _MISSING)
    # a pydantic ``Field(default=..., default_factory=...)`` written against the reference
    factory = getattr(default, "default_factory", None)
    if callable(factory):
        return factory()
    if hasattr(default, "default") and type(default).__name__ == "FieldInfo":
        value = default.default
        return _MISSING if repr(value) == "PydanticUndefined" else value
    return default


class Capability:
    """Base class of capabilities. Every method has a working default.

    For each run the runner clones each capability of a ``SandboxAgent`` (``clone``, so one
    agent can serve many sessions) and binds the clone to the run's sandbox session (``bind``),
    checks ``required_capability_types``, calls ``on_run_start`` and collects ``instructions``
    before the first model call, offers ``tools()`` to the model, and calls ``on_run_end`` when
    the run ends, whether it completed or failed.
    """

    #: the capability's type name (``required_capability_types`` may name it)
    type: str = ""
    _session: SandboxSession | None = None
    #: where the run's relative paths start (``SandboxRunConfig(cwd=...)``); bound per run
    workspace_scope: SandboxWorkspaceScope = SandboxWorkspaceScope()
    _reserved: ClassVar[frozenset[str]] = frozenset({"session"})

    def __init__(self, **fields: Any) -> None:
        """Keyword construction of the fields a subclass declares as class annotations (the
        reference SDK's capabilities are models built this way); unknown names raise
        ``TypeError``, a field without a default must be given. ``type`` (the capability's
        type name) is accepted by every capability."""
        if "type" in fields:
            self.type = str(fields.pop("type"))
        names = self._field_names() - {"type"}
        unknown = set(fields) - names
        if unknown:
            raise TypeError(f"{type(self).__name__} got unexpected fields: {sorted(unknown)}")
        for name in sorted(names):
            value = fields[name] if name in fields else _field_default(type(self), name)
            if value is _MISSING:
                raise TypeError(f"{type(self).__name__} needs the field {name!r}")
            setattr(self, name, copy.copy(value) if name not in fields else value)

    @classmethod
    def _field_names(cls) -> set[str]:
        names: set[str] = set()
        for klass in cls.__mro__:
            if klass is object or klass is Capability:
                continue
            for name, hint in vars(klass).get("__annotations__", {}).items():
                if name.startswith("_") or name in cls._reserved or "ClassVar" in str(hint):
                    continue
                names.add(name)
        return names

    def clone(self) -> Self:
        """A per-run copy (shallow: state shared on purpose stays shared)."""
        return copy.copy(self)

    def bind(self, session: SandboxSession) -> Self:
        """Bind this capability to the run's live session (the runner binds a clone)."""
        self._session = session
        return self

    def bind_workspace_scope(self, scope: SandboxWorkspaceScope) -> None:
        """Bind the run's working directory (the runner binds each run's clone): tools resolve
        the model's relative paths from it."""
        self.workspace_scope = scope

    @property
    def session(self) -> SandboxSession:
        if self._session is None:
            raise UserError(
                f"{type(self).__name__} is not bound to a sandbox session; run it through "
                "a SandboxAgent with RunConfig(sandbox=SandboxRunConfig(...))"
            )
        return self._session

    @session.setter
    def session(self, value: SandboxSession | None) -> None:
        self._session = value

    def required_capability_types(self) -> frozenset[builtins.type[Capability]] | set[str]:
        """Capabilities that must be present alongside this one: classes, or type names."""
        return frozenset()

    def tools(self) -> list[FunctionTool]:
        return []

    async def on_run_start(self, ctx: SandboxRunContext) -> None:
        """Validate and prepare before the first model call; raise ``UserError`` on misuse."""

    async def instructions(self, ctx: SandboxRunContext) -> str | None:
        return None

    async def on_run_end(self, ctx: SandboxRunContext, outcome: RunOutcome) -> None:
        """Called once when the run ends, completed or not."""


def bind_for_run(capability: Capability, session: SandboxSession) -> Capability:
    """A clone of ``capability`` bound to ``session``; ``bind`` may return the bound object
    (sandmem's form) or ``None`` after binding ``self`` (the reference's form)."""
    clone = capability.clone()
    bound = clone.bind(session)
    return bound if isinstance(bound, Capability) else clone


def _type_name(capability: Capability) -> set[str]:
    names = {type(c).__name__.lower() for c in type(capability).__mro__}
    return names | ({capability.type} if capability.type else set())


def missing_requirements(capabilities: list[Capability]) -> set[str]:
    """Names of required capabilities that none of ``capabilities`` provides."""
    present = set().union(*(_type_name(c) for c in capabilities)) if capabilities else set()
    missing: set[str] = set()
    for cap in capabilities:
        for required in cap.required_capability_types():
            if isinstance(required, str):
                if required.lower() not in present:
                    missing.add(required)
            elif not any(isinstance(other, required) for other in capabilities):
                missing.add(f"{required.__name__}()")
    return missing


def _wants_manifest(method: Any) -> bool:
    try:
        params = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return False
    if not params:
        return False
    first = params[0]
    annotation = first.annotation
    if isinstance(annotation, str):
        return first.name == "manifest" or "Manifest" in annotation
    if annotation is inspect.Parameter.empty:
        return first.name == "manifest"
    return "Manifest" in getattr(annotation, "__name__", str(annotation))


async def capability_instructions(capability: Capability, ctx: SandboxRunContext) -> str | None:
    """The capability's instructions, given the run context (sandmem's form) or the session's
    manifest (the reference's ``instructions(manifest)``)."""
    method = capability.instructions
    if _wants_manifest(method):
        sandbox = ctx.sandbox
        manifest = sandbox.state.manifest if sandbox is not None else None
        result = typing.cast(Any, method)(manifest)
    else:
        result = method(ctx)
    if inspect.isawaitable(result):
        result = await result
    return None if result is None else str(result)
