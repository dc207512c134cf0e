"""One step of one cell: its agent, its runs (the prompt, and the correction after a failed
check), its check, and why it failed when it did.

An exception of the agent run that is a setup error (``_failures.stops_eval``) is raised as
:class:`EvalStopped`; any other ends the run as the task's failure, with its reason kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sandmem._errors import SandmemError
from sandmem._items import Item, item_kind
from sandmem._usage import Usage
from sandmem.eval._failures import EvalStopped, describe, stops_eval
from sandmem.eval._key import EXTRACTIVE
from sandmem.eval._policy import scripted_policy
from sandmem.eval._suite import AgentLayout, Condition, Step, Suite, Task
from sandmem.models import Model, ModelRequest, ModelResponse

SCRIPTED = "scripted"
#: how much of a failed check's output a step keeps (its last characters)
CHECK_TAIL = 300


class StepMetrics(BaseModel):
    """What one step cost. Agent figures sum the step's runs (the first and, after a failed
    check, the correction); ``memory_*`` tokens are those of the memory generation that ran
    when the step's session stopped. ``reason`` says why a failed step failed (the run's
    error, or the check's exit status and the end of its output); ``memory_note`` what memory
    generation did not finish, when something did not."""

    step: int
    success: bool
    turns: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    memory_requests: int = 0
    memory_input_tokens: int = 0
    memory_output_tokens: int = 0
    tool_calls: int = 0
    wall_s: float = 0.0
    interventions: int = 0
    error: str | None = None
    reason: str | None = None
    memory_note: str | None = None


@dataclass
class StepCell:
    """What a step needs of its cell."""

    suite: Suite
    task: Task
    condition: Condition
    model: str
    memory: str
    provider: Any
    max_turns: int
    max_tokens: int | None
    scripted_uses_memory: bool
    name: str
    flush_timeout_s: float | None = None
    history: list[Item] = field(default_factory=list)


def _count_tool_calls(items: list[Item]) -> int:
    return sum(1 for item in items if item_kind(item) == "function_call")


def _one_line_tail(text: str, limit: int = CHECK_TAIL) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else "…" + flat[-limit:]


class _Metered(Model):
    """Counts the turns and sums the usage of every answer, also of a run that ends in an
    error (a run out of turns spent them: the report shows it)."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner
        self.name = inner.name
        self.turns = 0
        self.usage = Usage()

    async def get_response(self, request: ModelRequest) -> ModelResponse:
        self.turns += 1
        response = await self.inner.get_response(request)
        self.usage.add(response.usage)
        return response


class StepRun:
    """One step of one cell: its agent, its runs, its check."""

    def __init__(self, cell: StepCell, index: int, step: Step) -> None:
        self.cell = cell
        self.index = index
        self.step = step
        self.layout: AgentLayout = cell.task.agents[step.agent]
        self.metrics = StepMetrics(step=index, success=False)
        #: the step's conversation so far (what a correction follows)
        self.transcript: list[Item] = []

    def _model(self) -> Model:
        if self.cell.model == SCRIPTED:
            return scripted_policy(
                self.step.script,
                correction=self.step.correction,
                memories_dir=self.layout.memories_dir,
                uses_memory=self.cell.scripted_uses_memory,
            )
        model: Model = self.cell.provider.get_model(self.cell.model)
        return model

    def _agent(self, model: Model) -> Any:
        from sandmem import Filesystem, Memory, SandboxAgent, Shell
        from sandmem._settings import ModelSettings
        from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig

        capabilities: list[Any] = [Filesystem(), Shell()]
        if self.cell.condition == "memory":
            memory = self.cell.memory
            provider = None if memory == EXTRACTIVE else self.cell.provider
            extra: dict[str, Any] = {}
            if self.cell.flush_timeout_s is not None:
                extra["flush_timeout_s"] = self.cell.flush_timeout_s
            generate = MemoryGenerateConfig.for_model(memory, model_provider=provider, **extra)
            layout = MemoryLayoutConfig(
                memories_dir=self.layout.memories_dir, sessions_dir=self.layout.sessions_dir
            )
            # the cell's memory alone: the person's personal memory stays out of a measurement
            read = MemoryReadConfig(scopes=None)
            capabilities.insert(0, Memory(layout=layout, read=read, generate=generate))
        instructions = self.layout.instructions or self.cell.suite.instructions
        return SandboxAgent(
            name=f"eval-{self.step.agent}",
            instructions=instructions,
            model=model,
            model_settings=ModelSettings(max_tokens=self.cell.max_tokens),
            capabilities=capabilities,
        )

    async def _run_agent(self, session: Any, prompt: str, carry: list[Item]) -> None:
        """One agent run on ``carry`` (earlier items it sees) plus ``prompt``."""
        from sandmem import RunConfig, Runner, SandboxRunConfig

        model = _Metered(self._model())
        agent = self._agent(model)
        user: Item = {"role": "user", "content": prompt}
        run_input: str | list[Item] = [*carry, user] if carry else prompt
        config = RunConfig(sandbox=SandboxRunConfig(session=session), workflow_name="sandmem eval")
        try:
            result = await Runner.run(
                agent,
                run_input,
                run_config=config,
                max_turns=self.cell.max_turns,
                conversation_id=f"{self.cell.task.id}-step{self.index}",
            )
        except SandmemError as exc:
            if stops_eval(exc):
                raise EvalStopped(describe(exc), cell=self.cell.name) from exc
            self.metrics.error = describe(exc)
            self.metrics.tool_calls += _count_tool_calls(list(getattr(exc, "items", None) or []))
            return
        finally:
            self.metrics.turns += model.turns
            self.metrics.requests += model.usage.requests
            self.metrics.input_tokens += model.usage.input_tokens
            self.metrics.output_tokens += model.usage.output_tokens
        self.metrics.tool_calls += _count_tool_calls(result.new_items)
        self.transcript = result.to_input_list()

    async def _check(self, session: Any) -> str | None:
        """``None`` when the step's check passes, else why it did not."""
        result = await session.exec(
            self.step.check, timeout=self.step.check_timeout_s, raise_on_timeout=False
        )
        if result.exit_code == 0 and not result.timed_out:
            return None
        if result.timed_out:
            return f"the check timed out after {self.step.check_timeout_s:g} s"
        output = (result.stdout + result.stderr).decode("utf-8", "replace")
        tail = _one_line_tail(output)
        return f"the check exited {result.exit_code}" + (f": {tail}" if tail else "")

    async def run(self, session: Any) -> StepMetrics:
        for path, content in self.step.before.items():
            await session.write(path, content.encode())
        history = self.cell.history if self.cell.condition == "full-history" else []
        await self._run_agent(session, self.step.prompt, history)
        problem = await self._check(session)
        if problem is not None and self.step.correction is not None:
            first_error = self.metrics.error
            self.metrics.interventions += 1
            await self._run_agent(session, self.step.correction, self.transcript)
            problem = await self._check(session)
            self.metrics.error = self.metrics.error or first_error
        self.metrics.success = problem is None
        if problem is not None:
            self.metrics.reason = "; ".join(filter(None, [self.metrics.error, problem]))
        if self.transcript:
            self.cell.history = self.transcript
        return self.metrics


async def memory_view(root: Path, layout: AgentLayout) -> tuple[tuple[int, int, int], Any]:
    """Requests and tokens memory generation has spent in a workspace so far (the public
    memory API's totals from ``generation_log.jsonl``), and its status (``None``: no memory)."""
    from sandmem._errors import MemoryNotFoundError
    from sandmem.memory import MemoryLayoutConfig, status

    config = MemoryLayoutConfig(memories_dir=layout.memories_dir, sessions_dir=layout.sessions_dir)
    try:
        found = await status(root, layout=config)
    except MemoryNotFoundError:
        return (0, 0, 0), None
    one, two = found.tokens.phase_one, found.tokens.phase_two
    spent = (
        one.requests + two.requests,
        one.input_tokens + two.input_tokens,
        one.output_tokens + two.output_tokens,
    )
    return spent, found


def memory_problems(found: Any) -> tuple[str | None, str | None]:
    """From a memory ``status``: (a setup error that stops the eval, a note of what memory
    generation did not finish for the task's own reasons), each ``None`` when there is none."""
    if found is None:
        return None, None
    setup: list[str] = []
    notes: list[str] = []
    for conv in found.conversations:
        if conv.status == "pending" and not conv.last_error:
            setup.append(
                f"conversation {conv.rollout_id} is still pending after the session stopped "
                "(memory generation did not reach it: a flush timeout or a held lock)"
            )
        elif conv.status in ("pending", "failed") and conv.last_error:
            line = f"phase one {conv.status} for {conv.rollout_id}: {conv.last_error}"
            (setup if conv.failure_kind in ("environment", "configuration") else notes).append(line)
    last = found.last_consolidation
    if last is not None and last.status not in (None, "done", "skipped"):
        line = f"phase two {last.status}" + (f": {last.error}" if last.error else "")
        if last.failure_kind in ("environment", "configuration"):
            setup.append(line)
        else:
            notes.append(line)
    return (
        "memory generation failed: " + "; ".join(setup) if setup else None,
        "; ".join(notes) if notes else None,
    )
