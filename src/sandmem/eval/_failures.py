"""Telling a task failure from a failure of the setup, and checking the server first.

A step *fails* when the agent did not do the task: its check exits non-zero, it ran out of
turns, its answer was unusable. Those are results, and their cells are kept. An error of the
setup is not a result: the server cannot be reached, refuses the key, does not know the
model, times out, or memory generation failed for one of those reasons. Such an error stops
the eval at once (:class:`EvalStopped`, exit status 1 in the CLI) with its reason, and the
cell it happened in is not written, so fixing the setting and running again runs it.

    stops_eval(exc)        the agent run's exception: setup (True) or task failure (False)
    check_models()         one tiny request to each model before the first task
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sandmem._errors import (
    MCPServerError,
    ModelBehaviorError,
    ModelRequestError,
    SandmemError,
    UserError,
)
from sandmem.memory.state import classify
from sandmem.redaction import redact


def rerun_advice(fresh: bool) -> str:
    """How to resume an eval that stopped: rerun it as it was, except that a rerun with
    ``--fresh`` would run again (and overwrite) the finished cells it kept."""
    if fresh:
        return (
            "rerun the command without --fresh to resume where it stopped (with --fresh it "
            "would run the finished cells again)"
        )
    return "rerun the same command to resume where it stopped (finished cells are reused)"


class EvalStopped(SandmemError):
    """The eval stopped before its end for a reason that is not a task's failure (the model
    server, its key or model name, a timeout, the configuration). ``cell`` names the cell it
    happened in (``None``: before the first task); nothing of that cell was kept. ``fresh``:
    the eval ran with ``--fresh`` (the advice then says to rerun without it)."""

    def __init__(self, reason: str, *, cell: str | None = None, fresh: bool = False) -> None:
        where = f"in cell {cell}" if cell else "before the first task"
        super().__init__(
            f"eval stopped {where}: {reason}; this is not a task failure, so nothing of it "
            f"was kept: fix it and {rerun_advice(fresh)}"
        )
        self.reason = reason
        self.cell = cell


def describe(exc: BaseException) -> str:
    """``Type: message`` on one line, redacted (a server's error text may echo a key)."""
    return redact(" ".join(f"{type(exc).__name__}: {exc}".split()))


def stops_eval(exc: BaseException) -> bool:
    """True for an error of the setup: a model request that failed for the server, the
    network, a timeout, the key, the URL or the model name (``memory.state.classify`` says
    ``environment`` or ``configuration``), an agent's MCP server, or a misconfiguration
    (``UserError``). False for the task's own failures (turn limit, an unusable answer, a
    request the conversation made too large)."""
    if isinstance(exc, ModelRequestError):
        return classify(exc) != "rollout"
    return isinstance(exc, MCPServerError | UserError)


async def check_models(provider: Any, names: Iterable[str]) -> None:
    """One short request to each named model through ``provider``; raises
    :class:`EvalStopped` with the reason when one fails (an unreachable server, a refused key,
    an unknown model, a timeout) — before any task has run. An answer that is there but
    unusable (cut off at the small cap, say, by a reasoning model) passes: the server, the key
    and the model are what is checked."""
    from sandmem._settings import ModelSettings
    from sandmem.models import ModelRequest

    for name in dict.fromkeys(names):
        request = ModelRequest(
            instructions="Answer with one word.",
            input=[{"role": "user", "content": "Say OK."}],
            settings=ModelSettings(max_tokens=16),
        )
        try:
            await provider.get_model(name).get_response(request)
        except ModelBehaviorError:
            continue
        except SandmemError as exc:
            raise EvalStopped(
                f"model {name!r} did not answer a test request: {describe(exc)}"
            ) from None
