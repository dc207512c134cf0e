"""Running a suite: every task under every condition, ``repeat`` times, resumable.

One *cell* is (task, condition, repeat index). A cell runs the task's steps in order on one
workspace: each step is an agent run in a sandbox session; the session then stops (memory is
generated in the ``memory`` condition, and the workspace is snapshotted) and the next step
resumes from the snapshot. Each finished cell is written to ``OUT/cells/<cell>.json`` at once,
so an interrupted eval resumes where it stopped: finished cells are loaded, not rerun.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from sandmem._errors import SandmemError, UserError
from sandmem._items import Item, item_kind
from sandmem.eval._policy import scripted_policy
from sandmem.eval._suite import CONDITIONS, AgentLayout, Condition, Step, Suite, Task
from sandmem.redaction import Redactor, redact

SCRIPTED = "scripted"
Backend = Literal["local", "bwrap"]


class StepMetrics(BaseModel):
    """What one step cost. Agent figures sum the step's runs (the first and, after a failed
    check, the correction); ``memory_*`` tokens are those of the memory generation that ran
    when the step's session stopped."""

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


class CellResult(BaseModel):
    task: str
    condition: Condition
    repeat: int
    model: str
    steps: list[StepMetrics] = Field(default_factory=list)
    #: the cell's final workspace, when ``keep_workspaces`` kept it
    workspace: str | None = None

    @property
    def key(self) -> str:
        return cell_key(self.task, self.condition, self.repeat)


def cell_key(task: str, condition: str, repeat: int) -> str:
    return f"{task}.{condition}.{repeat}"


@dataclass
class EvalOptions:
    """How to run a suite. ``model`` is a model name for the run's provider, or ``"scripted"``
    for the offline deterministic policy (memory then uses the extractive engine);
    ``memory_model`` defaults to ``model`` (``extractive`` for ``scripted``)."""

    out: Path
    model: str = SCRIPTED
    memory_model: str | None = None
    repeat: int = 1
    backend: Backend = "local"
    concurrency: int = 1
    conditions: tuple[Condition, ...] = ("memory", "no-memory")
    #: for ``scripted``: whether the policy looks at memory (tests use False as a control)
    scripted_uses_memory: bool = True
    #: one line per finished step (the CLI prints them)
    progress: Callable[[str], None] | None = None
    #: model provider for named models (default: ``OpenAIProvider()``, closed at the end)
    provider: Any = None
    tasks: tuple[str, ...] | None = None
    #: keep each cell's final workspace in ``out/work/<cell>/workspace`` (default: removed)
    keep_workspaces: bool = False
    #: ignore (and replace) the finished cells of an earlier eval in ``out/cells``
    fresh: bool = False

    def check(self, suite: Suite) -> None:
        if self.repeat < 1:
            raise UserError("--repeat must be at least 1")
        if self.concurrency < 1:
            raise UserError("--concurrency must be at least 1")
        unknown = [c for c in self.conditions if c not in CONDITIONS]
        if unknown or not self.conditions:
            raise UserError(f"conditions must be some of {', '.join(CONDITIONS)}")
        if self.tasks is not None:
            known = {task.id for task in suite.tasks}
            missing = sorted(set(self.tasks) - known)
            if missing:
                raise UserError(f"no task named {', '.join(missing)} in suite {suite.name!r}")


@dataclass
class _Cell:
    suite: Suite
    task: Task
    condition: Condition
    repeat: int
    options: EvalOptions
    workdir: Path
    history: list[Item] = field(default_factory=list)


def _count_tool_calls(items: list[Item]) -> int:
    return sum(1 for item in items if item_kind(item) == "function_call")


def _client(backend: Backend) -> Any:
    from sandmem.sandboxes import BubblewrapSandboxClient, UnixLocalSandboxClient

    return BubblewrapSandboxClient() if backend == "bwrap" else UnixLocalSandboxClient()


async def _memory_spend(root: Path, layout: AgentLayout) -> tuple[int, int, int]:
    """Requests and tokens memory generation has spent in a workspace so far (the public
    memory API's totals from ``generation_log.jsonl``)."""
    from sandmem._errors import MemoryNotFoundError
    from sandmem.memory import MemoryLayoutConfig, status

    config = MemoryLayoutConfig(memories_dir=layout.memories_dir, sessions_dir=layout.sessions_dir)
    try:
        tokens = (await status(root, layout=config)).tokens
    except MemoryNotFoundError:
        return 0, 0, 0
    one, two = tokens.phase_one, tokens.phase_two
    return (
        one.requests + two.requests,
        one.input_tokens + two.input_tokens,
        one.output_tokens + two.output_tokens,
    )


def _as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _StepRun:
    """One step of one cell: its agent, its runs, its check."""

    def __init__(self, cell: _Cell, index: int, step: Step) -> None:
        self.cell = cell
        self.index = index
        self.step = step
        self.layout = cell.task.agents[step.agent]
        self.metrics = StepMetrics(step=index, success=False)
        #: the step's conversation so far (what a correction follows)
        self.transcript: list[Item] = []

    def _model(self) -> Any:
        options = self.cell.options
        if options.model == SCRIPTED:
            return scripted_policy(
                self.step.script,
                correction=self.step.correction,
                memories_dir=self.layout.memories_dir,
                uses_memory=options.scripted_uses_memory,
            )
        return options.provider.get_model(options.model)

    def _agent(self) -> Any:
        from sandmem import Filesystem, Memory, SandboxAgent, Shell
        from sandmem.memory import EXTRACTIVE, MemoryGenerateConfig, MemoryLayoutConfig

        capabilities: list[Any] = [Filesystem(), Shell()]
        if self.cell.condition == "memory":
            options = self.cell.options
            if options.model == SCRIPTED:
                memory_model: Any = options.memory_model or EXTRACTIVE
            else:
                memory_model = options.memory_model or options.model
            generate = MemoryGenerateConfig.for_model(memory_model, model_provider=options.provider)
            layout = MemoryLayoutConfig(
                memories_dir=self.layout.memories_dir, sessions_dir=self.layout.sessions_dir
            )
            capabilities.insert(0, Memory(layout=layout, generate=generate))
        instructions = self.layout.instructions or self.cell.suite.instructions
        return SandboxAgent(
            name=f"eval-{self.step.agent}",
            instructions=instructions,
            model=self._model(),
            capabilities=capabilities,
        )

    async def _run_agent(self, session: Any, prompt: str, carry: list[Item]) -> None:
        """One agent run on ``carry`` (earlier items it sees) plus ``prompt``."""
        from sandmem import RunConfig, Runner, SandboxRunConfig

        agent = self._agent()
        user: Item = {"role": "user", "content": prompt}
        run_input: str | list[Item] = [*carry, user] if carry else prompt
        config = RunConfig(sandbox=SandboxRunConfig(session=session), workflow_name="sandmem eval")
        try:
            result = await Runner.run(
                agent,
                run_input,
                run_config=config,
                max_turns=self.cell.suite.max_turns,
                conversation_id=f"{self.cell.task.id}-step{self.index}",
            )
        except SandmemError as exc:
            # a model server's error text may echo a key: redacted before it is stored
            self.metrics.error = redact(f"{type(exc).__name__}: {exc}")
            self.metrics.tool_calls += _count_tool_calls(list(getattr(exc, "items", None) or []))
            return
        finally:
            if self.cell.options.model == SCRIPTED:
                self.metrics.turns += len(agent.model.requests)
        usage = result.usage
        if self.cell.options.model != SCRIPTED:
            self.metrics.turns += usage.requests
        self.metrics.requests += usage.requests
        self.metrics.input_tokens += usage.input_tokens
        self.metrics.output_tokens += usage.output_tokens
        self.metrics.tool_calls += _count_tool_calls(result.new_items)
        self.transcript = result.to_input_list()

    async def _check(self, session: Any) -> bool:
        result = await session.exec(
            self.step.check, timeout=self.step.check_timeout_s, raise_on_timeout=False
        )
        return bool(result.exit_code == 0 and not result.timed_out)

    async def run(self, session: Any) -> StepMetrics:
        for path, content in self.step.before.items():
            await session.write(path, content.encode())
        history = self.cell.history if self.cell.condition == "full-history" else []
        await self._run_agent(session, self.step.prompt, history)
        ok = await self._check(session)
        if not ok and self.step.correction is not None:
            self.metrics.interventions += 1
            await self._run_agent(session, self.step.correction, self.transcript)
            ok = await self._check(session)
        self.metrics.success = ok
        if self.transcript:
            self.cell.history = self.transcript
        return self.metrics


async def _run_cell(cell: _Cell) -> CellResult:
    from sandmem.sandboxes import File, LocalSnapshotSpec, Manifest

    if cell.workdir.exists():
        shutil.rmtree(cell.workdir)
    cell.workdir.mkdir(parents=True)
    files = cell.suite.workspace_files(cell.task)
    manifest = Manifest(
        entries={path: File(content=data) for path, data in files.items()},
        root=cell.workdir / "workspace",
    )
    client = _client(cell.options.backend)
    session = await client.create(
        manifest=manifest, snapshot=LocalSnapshotSpec(base_path=cell.workdir / "snapshots")
    )
    result = CellResult(
        task=cell.task.id, condition=cell.condition, repeat=cell.repeat, model=cell.options.model
    )
    try:
        for index, step in enumerate(cell.task.steps, 1):
            if index > 1:
                session = await client.resume(session.state)
            run = _StepRun(cell, index, step)
            root = Path(str(session.state.manifest.root))
            before = await _memory_spend(root, run.layout)
            started = time.perf_counter()
            async with session:
                metrics = await run.run(session)
            metrics.wall_s = round(time.perf_counter() - started, 4)
            after = await _memory_spend(root, run.layout)
            metrics.memory_requests += after[0] - before[0]
            metrics.memory_input_tokens += after[1] - before[1]
            metrics.memory_output_tokens += after[2] - before[2]
            result.steps.append(metrics)
            _progress(cell, metrics, len(cell.task.steps))
    finally:
        if cell.options.keep_workspaces:
            result.workspace = str(session.state.manifest.root)
        else:
            await client.delete(session)
            shutil.rmtree(cell.workdir, ignore_errors=True)
    return result


def _progress(cell: _Cell, metrics: StepMetrics, steps: int) -> None:
    if cell.options.progress is None:
        return
    verdict = "ok" if metrics.success else "FAILED"
    extra = f", {metrics.interventions} correction" if metrics.interventions else ""
    cell.options.progress(
        f"{cell.task.id} [{cell.condition} #{cell.repeat + 1}] step {metrics.step}/{steps}: "
        f"{verdict} in {metrics.turns} turns, {metrics.tool_calls} tool calls{extra}"
    )


def _load_done(cells_dir: Path) -> dict[str, CellResult]:
    done: dict[str, CellResult] = {}
    for path in sorted(cells_dir.glob("*.json")):
        try:
            cell = CellResult.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            continue  # a half-written or foreign file: the cell runs again
        if path.name == f"{cell.key}.json":
            done[cell.key] = cell
    return done


def _write_cell(cells_dir: Path, cell: CellResult) -> None:
    target = cells_dir / f"{cell.key}.json"
    temp = cells_dir / f".{cell.key}.{os.getpid()}.tmp"
    temp.write_text(json.dumps(Redactor().redact_obj(cell.model_dump(mode="json")), indent=2))
    os.replace(temp, target)


async def run_suite(suite: Suite, options: EvalOptions) -> list[CellResult]:
    """Run every (task, condition, repeat) cell not already finished in ``options.out`` (all
    of them with ``options.fresh``); the progress callback is told how many are reused."""
    options.check(suite)
    cells_dir = options.out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    done = {} if options.fresh else _load_done(cells_dir)
    tasks = [t for t in suite.tasks if options.tasks is None or t.id in options.tasks]
    wanted = {
        cell_key(t.id, c, r)
        for t in tasks
        for c in options.conditions
        for r in range(options.repeat)
    }
    reused = len(wanted & done.keys())
    if reused and options.progress is not None:
        options.progress(
            f"reusing {reused} finished cell(s) from {cells_dir} (an earlier eval there); "
            "pass --fresh to run them again"
        )
    todo = [
        _Cell(suite, task, condition, repeat, options, options.out / "work" / key)
        for task in tasks
        for condition in options.conditions
        for repeat in range(options.repeat)
        if (key := cell_key(task.id, condition, repeat)) not in done
    ]
    owned = None
    if options.model != SCRIPTED and options.provider is None:
        from sandmem.models import OpenAIProvider

        owned = options.provider = OpenAIProvider()
    gate = asyncio.Semaphore(options.concurrency)

    async def one(cell: _Cell) -> None:
        async with gate:
            result = await _run_cell(cell)
            _write_cell(cells_dir, result)
            done[result.key] = result

    try:
        await asyncio.gather(*(one(cell) for cell in todo))
    finally:
        if owned is not None:
            await owned.aclose()
            options.provider = None
    if not options.keep_workspaces:
        shutil.rmtree(options.out / "work", ignore_errors=True)
    order = {
        cell_key(t.id, c, r): n
        for n, (t, c, r) in enumerate(
            (t, c, r) for t in tasks for c in options.conditions for r in range(options.repeat)
        )
    }
    return sorted((c for c in done.values() if c.key in order), key=lambda c: order[c.key])
