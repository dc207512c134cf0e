"""Running a suite: every task under every condition, ``repeat`` times, resumable.

One *cell* is (task, condition, repeat index). A cell runs the task's steps in order on one
workspace: each step is an agent run in a sandbox session; the session then stops (memory is
generated in the ``memory`` condition, and the workspace is snapshotted) and the next step
resumes from the snapshot. Each finished cell is written to
``OUT/cells/<task>.<condition>.<repeat>.<key digest>.json`` at once, so an interrupted eval
resumes where it stopped: finished cells made under the same key (``_key.CellKey``: models,
server, suite and task digests, limits) are loaded, not rerun; any other cell is ignored.

With a model (not ``scripted``), each model is asked one short request before the first task;
an error of the setup (``_failures``) stops the eval with its reason and writes nothing of
the cell it happened in.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from sandmem._errors import UserError
from sandmem._settings import DEFAULT_MAX_TOKENS, ModelSettings, with_max_tokens
from sandmem.eval._failures import EvalStopped, check_models
from sandmem.eval._key import EXTRACTIVE, CellKey, Settings, cell_key, suite_digest, task_digest
from sandmem.eval._step import (
    SCRIPTED,
    StepCell,
    StepMetrics,
    StepRun,
    memory_problems,
    memory_view,
)
from sandmem.eval._suite import CONDITIONS, Condition, Suite, Task
from sandmem.redaction import Redactor

Backend = Literal["local", "bwrap"]
OPENAI_URL = "https://api.openai.com/v1"


class CellResult(BaseModel):
    task: str
    condition: Condition
    repeat: int
    model: str
    #: what decided this result; a cell is reused only under an equal key
    cell_key: CellKey | None = None
    steps: list[StepMetrics] = Field(default_factory=list)
    #: the cell's final workspace, when ``keep_workspaces`` kept it
    workspace: str | None = None

    @property
    def key(self) -> str:
        return cell_name(self.task, self.condition, self.repeat)

    def file_name(self) -> str | None:
        if self.cell_key is None:
            return None
        return f"{self.key}.{self.cell_key.digest}.json"


def cell_name(task: str, condition: str, repeat: int) -> str:
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
    #: model provider for named models (default: the process's ``OpenAIProvider``, its
    #: clients closed at the end)
    provider: Any = None
    tasks: tuple[str, ...] | None = None
    #: keep each cell's final workspace in ``out/work/<cell>/workspace`` (default: removed)
    keep_workspaces: bool = False
    #: ignore (and replace) the finished cells of an earlier eval in ``out/cells``
    fresh: bool = False
    #: the agent's turn limit per run (default: the suite's ``max_turns``)
    max_turns: int | None = None
    #: the cap on each agent request's output tokens (default: ``SANDMEM_MAX_TOKENS``, else
    #: the run's default, 4096)
    max_tokens: int | None = None
    #: how long one memory generation (phase one and two at a step's stop) may take
    #: (default: ``MemoryGenerateConfig.flush_timeout_s``); a slow local model needs more
    flush_timeout_s: float | None = None

    def check(self, suite: Suite) -> None:
        if self.repeat < 1:
            raise UserError("--repeat must be at least 1")
        if self.concurrency < 1:
            raise UserError("--concurrency must be at least 1")
        if self.max_turns is not None and self.max_turns < 1:
            raise UserError("--max-turns must be at least 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UserError("--max-tokens must be at least 1")
        if self.flush_timeout_s is not None and not self.flush_timeout_s > 0:
            raise UserError("--flush-timeout must be positive seconds")
        if self.model == SCRIPTED and self.memory_model not in (None, EXTRACTIVE):
            raise UserError("the scripted agent generates memory offline: drop --memory-model")
        unknown = [c for c in self.conditions if c not in CONDITIONS]
        if unknown or not self.conditions:
            raise UserError(f"conditions must be some of {', '.join(CONDITIONS)}")
        if self.tasks is not None:
            known = {task.id for task in suite.tasks}
            missing = sorted(set(self.tasks) - known)
            if missing:
                raise UserError(f"no task named {', '.join(missing)} in suite {suite.name!r}")

    @property
    def memory(self) -> str:
        """Both memory phases' model, or ``extractive``."""
        if self.model == SCRIPTED:
            return EXTRACTIVE
        return self.memory_model or self.model


@dataclass
class _Cell:
    step: StepCell
    repeat: int
    key: CellKey
    options: EvalOptions
    workdir: Path

    @property
    def name(self) -> str:
        return cell_name(self.step.task.id, self.step.condition, self.repeat)


def _client(backend: Backend) -> Any:
    from sandmem.sandboxes import BubblewrapSandboxClient, UnixLocalSandboxClient

    return BubblewrapSandboxClient() if backend == "bwrap" else UnixLocalSandboxClient()


async def _run_step(cell: _Cell, run: StepRun, session: Any) -> StepMetrics:
    """The step in ``session`` (stopped at the end, which generates memory), with the memory
    generation it caused; a setup error of that generation stops the eval."""
    root = Path(str(session.state.manifest.root))
    before, _ = await memory_view(root, run.layout)
    started = time.perf_counter()
    async with session:
        metrics = await run.run(session)
    metrics.wall_s = round(time.perf_counter() - started, 4)
    after, found = await memory_view(root, run.layout)
    metrics.memory_requests += after[0] - before[0]
    metrics.memory_input_tokens += after[1] - before[1]
    metrics.memory_output_tokens += after[2] - before[2]
    setup, note = memory_problems(found)
    if setup is not None:
        raise EvalStopped(setup, cell=cell.name)
    metrics.memory_note = note
    return metrics


async def _run_cell(cell: _Cell) -> CellResult:
    from sandmem.sandboxes import File, LocalSnapshotSpec, Manifest

    if cell.workdir.exists():
        shutil.rmtree(cell.workdir)
    cell.workdir.mkdir(parents=True)
    files = cell.step.suite.workspace_files(cell.step.task)
    manifest = Manifest(
        entries={path: File(content=data) for path, data in files.items()},
        root=cell.workdir / "workspace",
    )
    client = _client(cell.options.backend)
    session = await client.create(
        manifest=manifest, snapshot=LocalSnapshotSpec(base_path=cell.workdir / "snapshots")
    )
    result = CellResult(
        task=cell.step.task.id,
        condition=cell.step.condition,
        repeat=cell.repeat,
        model=cell.options.model,
        cell_key=cell.key,
    )
    try:
        for index, step in enumerate(cell.step.task.steps, 1):
            if index > 1:
                session = await client.resume(session.state)
            metrics = await _run_step(cell, StepRun(cell.step, index, step), session)
            result.steps.append(metrics)
            _progress(cell, metrics, len(cell.step.task.steps))
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
    line = (
        f"{cell.step.task.id} [{cell.step.condition} #{cell.repeat + 1}] step "
        f"{metrics.step}/{steps}: {verdict} in {metrics.turns} turns, {metrics.tool_calls} tool "
        f"calls{extra}, {metrics.wall_s:.1f} s"
    )
    if metrics.reason:
        line += f"\n    why: {metrics.reason}"
    if metrics.memory_note:
        line += f"\n    memory: {metrics.memory_note}"
    cell.options.progress(line)


def _load_done(cells_dir: Path, keys: dict[str, CellKey]) -> tuple[dict[str, CellResult], int]:
    """The finished cells made under the wanted keys (``keys``: cell name -> key), and how
    many other cell files were ignored (another key, an old format, or unreadable)."""
    done: dict[str, CellResult] = {}
    ignored = 0
    for path in sorted(cells_dir.glob("*.json")):
        try:
            cell = CellResult.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            ignored += 1  # a half-written or foreign file: the cell runs again
            continue
        if cell.cell_key is not None and keys.get(cell.key) == cell.cell_key:
            if path.name == cell.file_name():
                done[cell.key] = cell
                continue
        ignored += 1
    return done, ignored


def _write_cell(cells_dir: Path, cell: CellResult) -> None:
    name = cell.file_name()
    assert name is not None
    temp = cells_dir / f".{name}.{os.getpid()}.tmp"
    temp.write_text(json.dumps(Redactor().redact_obj(cell.model_dump(mode="json")), indent=2))
    os.replace(temp, cells_dir / name)


async def _server(provider: Any) -> tuple[str | None, str | None]:
    """The base URL and API the provider's models talk to (as its client says)."""
    url: str | None = None
    client = getattr(provider, "client", None)
    if callable(client):
        url = str((await client()).base_url).rstrip("/")
    api = getattr(provider, "api", None)
    return url, (str(api) if api is not None else None)


async def settings_of(suite: Suite, options: EvalOptions) -> Settings:
    """What this eval runs with: the report's header and the cells' keys come from it."""
    server = api = None
    max_tokens = options.max_tokens
    if options.model != SCRIPTED:
        server, api = await _server(options.provider)
        # the cap every agent request carries: the option, else SANDMEM_MAX_TOKENS, else the
        # run's default (what the run loop sends; it decides results, so it is in the key)
        capped = with_max_tokens(ModelSettings(max_tokens=max_tokens), DEFAULT_MAX_TOKENS)
        max_tokens = capped.max_tokens
    return Settings(
        agent_model=options.model,
        memory=options.memory,
        server=server,
        api=api,
        backend=options.backend,
        max_turns=options.max_turns or suite.max_turns,
        max_tokens=max_tokens,
        scripted_uses_memory=options.scripted_uses_memory if options.model == SCRIPTED else None,
        suite=suite.name,
        suite_digest=suite_digest(suite),
        task_digests={task.id: task_digest(suite, task) for task in suite.tasks},
    )


@dataclass
class SuiteRun:
    """What ``run_suite`` found and did: the cells of this eval in suite order, the settings
    they were made under, and how many were reused from an earlier eval."""

    cells: list[CellResult]
    settings: Settings
    reused: int
    ran: int


def _plan(
    suite: Suite, options: EvalOptions, settings: Settings
) -> tuple[list[Task], dict[str, CellKey]]:
    tasks = [t for t in suite.tasks if options.tasks is None or t.id in options.tasks]
    keys = {
        cell_name(t.id, c, r): cell_key(settings, t.id, c)
        for t in tasks
        for c in options.conditions
        for r in range(options.repeat)
    }
    return tasks, keys


def _say(options: EvalOptions, line: str) -> None:
    if options.progress is not None:
        options.progress(line)


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    """The exception to raise for a group of failed cells: a setup error first."""
    flat: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop(0)
        if isinstance(exc, BaseExceptionGroup):
            pending[:0] = list(exc.exceptions)
        else:
            flat.append(exc)
    stopped = [exc for exc in flat if isinstance(exc, EvalStopped)]
    return (stopped or flat)[0]


async def _prepare(suite: Suite, options: EvalOptions) -> tuple[Settings, Any]:
    """The settings; with a model, the provider (``owned`` when made here) after its models
    answered a test request."""
    owned = None
    if options.model != SCRIPTED and options.provider is None:
        from sandmem.models._provider import default_provider

        # the process's provider: `sandmem eval --timeout/--max-retries` configure it
        owned = options.provider = default_provider()
    try:
        settings = await settings_of(suite, options)
        if options.model != SCRIPTED:
            names = [options.model]
            if "memory" in options.conditions and options.memory != EXTRACTIVE:
                names.append(options.memory)
            await check_models(options.provider, names)
    except BaseException:
        if owned is not None:
            await owned.aclose()
            options.provider = None
        raise
    return settings, owned


async def run_suite_detailed(suite: Suite, options: EvalOptions) -> SuiteRun:
    """Run every (task, condition, repeat) cell not already finished under the same key in
    ``options.out`` (all of them with ``options.fresh``). Raises :class:`EvalStopped` on an
    error of the setup (nothing of the cell it happened in is written)."""
    options.check(suite)
    settings, owned = await _prepare(suite, options)
    try:
        return await _run_cells(suite, options, settings)
    except EvalStopped as exc:
        if not options.fresh:
            raise
        raise EvalStopped(exc.reason, cell=exc.cell, fresh=True) from exc.__cause__
    finally:
        if owned is not None:
            await owned.aclose()
            options.provider = None
        if not options.keep_workspaces:
            shutil.rmtree(options.out / "work", ignore_errors=True)


def _reuse(options: EvalOptions, keys: dict[str, CellKey]) -> dict[str, CellResult]:
    cells_dir = options.out / "cells"
    cells_dir.mkdir(parents=True, exist_ok=True)
    if options.fresh:
        return {}
    done, ignored = _load_done(cells_dir, keys)
    if done:
        _say(
            options,
            f"reusing {len(done)} finished cell(s) from {cells_dir} made with the same models, "
            "server, suite and tasks; pass --fresh to run them again",
        )
    if ignored:
        _say(options, f"ignoring {ignored} cell file(s) in {cells_dir} made with other settings")
    return done


async def _run_cells(suite: Suite, options: EvalOptions, settings: Settings) -> SuiteRun:
    tasks, keys = _plan(suite, options, settings)
    done = _reuse(options, keys)
    reused = len(done)
    todo = [
        _Cell(
            StepCell(
                suite=suite,
                task=task,
                condition=condition,
                model=options.model,
                memory=options.memory,
                provider=options.provider,
                max_turns=settings.max_turns,
                max_tokens=options.max_tokens,
                scripted_uses_memory=options.scripted_uses_memory,
                name=name,
                flush_timeout_s=options.flush_timeout_s,
            ),
            repeat,
            keys[name],
            options,
            options.out / "work" / name,
        )
        for task in tasks
        for condition in options.conditions
        for repeat in range(options.repeat)
        if (name := cell_name(task.id, condition, repeat)) not in done
    ]
    gate = asyncio.Semaphore(options.concurrency)

    async def one(cell: _Cell) -> None:
        async with gate:
            result = await _run_cell(cell)
            _write_cell(options.out / "cells", result)
            done[result.key] = result

    try:
        async with asyncio.TaskGroup() as group:
            for cell in todo:
                group.create_task(one(cell))
    except BaseExceptionGroup as failed:
        raise _first(failed) from None
    order = {name: n for n, name in enumerate(keys)}
    cells = sorted(done.values(), key=lambda c: order[c.key])
    return SuiteRun(cells, settings, reused, len(todo))


async def run_suite(suite: Suite, options: EvalOptions) -> list[CellResult]:
    """The cells of :func:`run_suite_detailed`, in suite order."""
    return (await run_suite_detailed(suite, options)).cells
