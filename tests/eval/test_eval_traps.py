"""Issue 36: an eval that cannot mislead, tried as a new user would, against the fake server.

- a cell is reused only when made with the same agent model, memory model, server, API,
  limits, suite and task: never another eval's numbers under this eval's name;
- an error of the setup (no server, connection refused, a refused key, an unknown model, a
  timeout, memory generation failing for one of those) stops the eval with exit status 1 and
  its reason, and is never cached: fixing it and rerunning runs the cell;
- the server is checked before the first task; each failed step prints why; the report's
  header states exactly what ran.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from fake_openai import FakeOpenAIServer, FakeReply, FakeRequest

from sandmem._errors import ModelRequestError
from sandmem.cli import cli
from sandmem.eval import EvalOptions, EvalStopped, parse_suite, run_eval
from sandmem.models import ModelProvider, ModelRequest
from sandmem.testing import FunctionModel, text, tool_call

CHECK_PROMPT = "Say OK."

SUITE = """
name = "traps"
[[task]]
id = "hello"
[task.files]
"README.md" = "# x"
[[task.step]]
prompt = "Create hello.txt containing hello."
check = "grep -qx hello hello.txt"
[task.step.script]
actions = [{ cmd = "echo hello > hello.txt" }]
[[task]]
id = "bye"
[task.files]
"README.md" = "# y"
[[task.step]]
prompt = "Create bye.txt containing bye."
check = "grep -qx bye bye.txt"
[task.step.script]
actions = [{ cmd = "echo bye > bye.txt" }]
"""


def agent(req: FakeRequest) -> FakeReply:
    """Does what each prompt asks with one shell command, then answers; memory phase one
    (structured output) gets a small valid answer."""
    if req.wants_json():
        return FakeReply.json(
            {"rollout_slug": "task", "rollout_summary": "# Task\nDid it.", "raw_memory": "- ok"}
        )
    prompt = req.last_user_text()
    if prompt == CHECK_PROMPT or req.tool_outputs():
        return FakeReply(text="OK")
    word = "hello" if "hello" in prompt else "bye"
    return FakeReply(tool_calls=[("exec_command", {"cmd": f"echo {word} > {word}.txt"}, "c1")])


def lazy(req: FakeRequest) -> FakeReply:
    """Never does the task: a task failure, not a setup error."""
    return FakeReply(text="I would rather not.")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sandmem_eval(
    suite: Path,
    out: Path,
    *args: str,
    server: str | None,
    api: str = "chat_completions",
    **extra: str,
) -> Result:
    env = {"SANDMEM_OPENAI_API": api, "OPENAI_API_KEY": "dummy"} if server else {}
    env.update(extra)
    if server:
        env["OPENAI_BASE_URL"] = server
    argv = ["eval", str(suite), "--out", str(out), "--conditions", "no-memory", *args]
    return CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)


def cells(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "cells").glob("*.json"))


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(SUITE)
    return path


# ---------------------------------------------------------------- cells and their keys


def test_the_issue_trap_scripted_cells_are_not_reported_under_a_models_name(
    tmp_path: Path, suite: Path
) -> None:
    out = tmp_path / "out"
    first = sandmem_eval(suite, out, server=None)
    assert first.exit_code == 0, first.output
    before = (out / "report.md").read_text()
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    second = sandmem_eval(suite, out, "--model", "gpt-5.4-mini", "--max-retries", "0", server=dead)
    assert second.exit_code == 1, second.output
    assert "reusing" not in second.output
    assert "eval stopped before the first task" in second.output
    assert "gpt-5.4-mini" in second.output and "could not reach the server" in second.output
    # the scripted report is untouched, and no cell was added
    assert (out / "report.md").read_text() == before
    assert len(cells(out)) == 2


def test_a_cell_is_reused_only_under_the_same_model_server_and_api(
    tmp_path: Path, suite: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = agent
    out = tmp_path / "out"
    url = fake_openai.base_url

    def run(*args: str, server: str = url, api: str = "chat_completions", **env: str) -> Result:
        result = sandmem_eval(suite, out, *args, server=server, api=api, **env)
        assert result.exit_code == 0, result.output
        return result

    assert "reusing" not in run("--model", "m1").output
    assert "reusing 2 finished cell(s)" in run("--model", "m1").output
    assert "reusing" not in run("--model", "m2").output  # another model
    assert "reusing" not in run("--model", "m1", api="responses").output  # another API
    assert "reusing" not in run("--model", "m1", "--max-tokens", "64").output  # another cap
    # the cap the requests carry by default is the same cap: its cells are reused
    assert "reusing 2" in run("--model", "m1", "--max-tokens", "4096").output
    assert "reusing" not in run("--model", "m1", "--max-turns", "5").output  # another limit
    # SANDMEM_MAX_TOKENS=64 sends what --max-tokens 64 sent: those cells, not the default's
    assert "reusing 2" in run("--model", "m1", SANDMEM_MAX_TOKENS="64").output
    with FakeOpenAIServer(agent) as other:  # the same model name on another server
        other_url = other.base_url
        moved = run("--model", "m1", server=other_url)
        assert "reusing" not in moved.output and len(other.requests) > 1
    assert len(cells(out)) == 2 * 6
    # the report says what this eval ran, never what an earlier one did
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["server"] == other_url.rstrip("/")
    assert (report["ran"], report["reused"]) == (2, 0)


async def test_a_changed_task_or_suite_runs_again_and_only_what_changed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lines: list[str] = []
    options = EvalOptions(out=out, conditions=("no-memory",), progress=lines.append)
    await run_eval(parse_suite(SUITE), options)
    lines.clear()
    # one task's initial file changes: that task runs again, the other is reused
    changed = SUITE.replace('"# y"', '"# y, edited"')
    report = await run_eval(parse_suite(changed), options)
    assert (report.ran, report.reused) == (1, 1)
    assert any(line.startswith("bye [no-memory #1]") for line in lines)
    assert not any(line.startswith("hello [") for line in lines)
    # the suite's instructions change: both run again
    lines.clear()
    instructed = 'instructions = "Be brief."\n' + changed
    report = await run_eval(parse_suite(instructed), options)
    assert (report.ran, report.reused) == (2, 0)
    # a check changes: the task runs again
    rechecked = instructed.replace("grep -qx bye bye.txt", "test -s bye.txt")
    report = await run_eval(parse_suite(rechecked), options)
    assert (report.ran, report.reused) == (1, 1)


async def test_memory_model_changes_rerun_memory_cells_only(tmp_path: Path) -> None:
    calls: list[str] = []

    def respond(request: ModelRequest) -> Any:
        calls.append(request.instructions or "")
        if request.output_schema is not None:
            answer = {"rollout_slug": "t", "rollout_summary": "# T\nDid it.", "raw_memory": "- x"}
            return [text(json.dumps(answer))]
        outputs = [i for i in request.input if i.get("type") == "function_call_output"]
        if outputs or (request.input and request.input[-1].get("content") == CHECK_PROMPT):
            return [text("OK")]
        return [tool_call("exec_command", {"cmd": "echo hello > hello.txt"})]

    class Provider(ModelProvider):
        def get_model(self, name: str | None) -> FunctionModel:
            return FunctionModel(respond, name=name or "m")

    suite = parse_suite(SUITE)
    out = tmp_path / "out"

    def options(memory_model: str) -> EvalOptions:
        return EvalOptions(
            out=out,
            model="agent",
            memory_model=memory_model,
            conditions=("memory", "no-memory"),
            tasks=("hello",),
            provider=Provider(),
        )

    first = await run_eval(suite, options("extractive"))
    assert (first.ran, first.reused) == (2, 0)
    again = await run_eval(suite, options("extractive"))
    assert (again.ran, again.reused) == (0, 2)
    other = await run_eval(suite, options("memory-llm"))
    assert (other.ran, other.reused) == (1, 1)  # the no-memory cell cannot change
    assert [c.condition for c in other.cells] == ["memory", "no-memory"]


async def test_hostile_or_foreign_cell_files_are_never_reused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = EvalOptions(out=out, conditions=("no-memory",), tasks=("hello",))
    await run_eval(parse_suite(SUITE), options)
    [name] = cells(out)
    path = out / "cells" / name
    data = json.loads(path.read_text())
    # a cell claiming success under another key, renamed to the wanted file name
    forged = {**data, "steps": [{**data["steps"][0], "turns": 999}]}
    forged["cell_key"] = {**data["cell_key"], "agent_model": "gpt-5.4-mini"}
    path.write_text(json.dumps(forged))
    # an old-format file (no key) and a file that is not a cell
    (out / "cells" / "hello.no-memory.0.json").write_text(json.dumps(data | {"cell_key": None}))
    (out / "cells" / "junk.json").write_text("{not json")
    lines: list[str] = []
    options.progress = lines.append
    report = await run_eval(parse_suite(SUITE), options)
    assert (report.ran, report.reused) == (1, 0)
    assert report.cells[0].steps[0].turns != 999
    assert any("ignoring 3 cell file(s)" in line for line in lines)


# ---------------------------------------------------------------- setup errors


def test_no_server_configured_stops_before_any_task(tmp_path: Path, suite: Path) -> None:
    out = tmp_path / "out"
    result = sandmem_eval(suite, out, "--model", "m", server=None)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: no OpenAI server configured")
    assert "OPENAI_BASE_URL" in result.output
    assert "FAILED" not in result.output and cells(out) == []


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ({"status": 401, "message": "invalid api key"}, "HTTP 401"),
        ({"status": 404, "message": "model 'm' not found"}, "HTTP 404"),
        ({"status": 503}, "HTTP 503"),
        ({"delay_s": 3.0}, "timed out"),
    ],
)
def test_a_server_fault_before_the_first_task_stops_with_its_reason(
    tmp_path: Path, suite: Path, fake_openai: FakeOpenAIServer, fault: dict[str, Any], reason: str
) -> None:
    fake_openai.handler = agent
    fake_openai.inject(**fault, times=1000)
    out = tmp_path / "out"
    args = ("--model", "m", "--timeout", "0.5", "--max-retries", "0")
    result = sandmem_eval(suite, out, *args, server=fake_openai.base_url)
    assert result.exit_code == 1, result.output
    assert "eval stopped before the first task" in result.output and reason in result.output
    assert "model 'm' did not answer a test request" in result.output
    assert cells(out) == [] and not (out / "report.json").exists()
    assert len(fake_openai.requests) == 1  # one check, no task was started


@pytest.mark.parametrize("status", [401, 404, 500])
def test_a_fault_in_the_middle_keeps_finished_cells_and_caches_nothing_of_its_cell(
    tmp_path: Path, suite: Path, fake_openai: FakeOpenAIServer, status: int
) -> None:
    served: list[str] = []

    def breaks_on_bye(req: FakeRequest) -> FakeReply:
        served.append(req.last_user_text())
        return agent(req)

    fake_openai.handler = breaks_on_bye
    out = tmp_path / "out"
    args = ("--model", "m", "--max-retries", "0")
    # check + the hello task's 2 requests succeed; the bye task's first request fails
    fake_openai.handler = breaks_on_bye
    original = fake_openai.handler

    def gate(req: FakeRequest) -> FakeReply:
        if "bye" in req.last_user_text() and not req.tool_outputs():
            fake_openai.inject(status=status, times=1000)
        return original(req)

    fake_openai.handler = gate
    result = sandmem_eval(suite, out, *args, server=fake_openai.base_url)
    # the fault is injected while the bye request is answered: the next request fails
    assert result.exit_code == 1, result.output
    assert "eval stopped in cell bye.no-memory.0" in result.output
    assert f"HTTP {status}" in result.output
    assert [name.rsplit(".", 2)[0] for name in cells(out)] == ["hello.no-memory.0"]
    # fixed: the rerun reuses hello and runs bye, which passes
    with fake_openai._lock:
        fake_openai._faults.clear()
    fake_openai.handler = agent
    again = sandmem_eval(suite, out, *args, server=fake_openai.base_url)
    assert again.exit_code == 0, again.output
    assert "reusing 1 finished cell(s)" in again.output
    assert "bye [no-memory #1] step 1/1: ok" in again.output


async def test_memory_generation_failing_for_the_server_stops_the_eval(tmp_path: Path) -> None:
    def respond(request: ModelRequest) -> Any:
        if request.output_schema is not None:  # memory phase one: the server falls over
            raise ModelRequestError("HTTP 503: overloaded", status_code=503, retryable=True)
        outputs = [i for i in request.input if i.get("type") == "function_call_output"]
        if outputs or (request.input and request.input[-1].get("content") == CHECK_PROMPT):
            return [text("OK")]
        return [tool_call("exec_command", {"cmd": "echo hello > hello.txt"})]

    class Provider(ModelProvider):
        def get_model(self, name: str | None) -> FunctionModel:
            return FunctionModel(respond, name=name or "m")

    out = tmp_path / "out"
    options = EvalOptions(
        out=out, model="agent", conditions=("memory",), tasks=("hello",), provider=Provider()
    )
    with pytest.raises(EvalStopped) as stopped:
        await run_eval(parse_suite(SUITE), options)
    assert stopped.value.cell == "hello.memory.0"
    assert "memory generation failed" in str(stopped.value) and "503" in str(stopped.value)
    assert cells(out) == []


# ---------------------------------------------------------------- task failures and the report


def test_a_task_failure_is_kept_and_each_failed_step_says_why(
    tmp_path: Path, suite: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = lazy
    out = tmp_path / "out"
    result = sandmem_eval(suite, out, "--model", "m", server=fake_openai.base_url)
    assert result.exit_code == 0, result.output  # the model failed the tasks: a result
    lines = result.output.splitlines()
    for task in ("hello", "bye"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{task} [no-memory #1]"))
        assert "FAILED in 1 turns" in lines[at]
        assert lines[at + 1].strip() == (
            f"why: the check exited 2: grep: {task}.txt: No such file or directory"
        )
    assert len(cells(out)) == 2
    again = sandmem_eval(suite, out, "--model", "m", server=fake_openai.base_url)
    assert "reusing 2 finished cell(s)" in again.output


async def test_turn_limit_and_a_too_long_request_are_task_failures_with_reasons(
    tmp_path: Path,
) -> None:
    def respond(request: ModelRequest) -> Any:
        if request.input and request.input[-1].get("content") == CHECK_PROMPT:
            return [text("OK")]
        if "bye" in str(request.input[0].get("content")):
            raise ModelRequestError("HTTP 400: context too long", status_code=400)
        return [tool_call("exec_command", {"cmd": "true"})]  # never stops

    class Provider(ModelProvider):
        def get_model(self, name: str | None) -> FunctionModel:
            return FunctionModel(respond, name=name or "m")

    lines: list[str] = []
    options = EvalOptions(
        out=tmp_path,
        model="agent",
        conditions=("no-memory",),
        provider=Provider(),
        max_turns=3,
        progress=lines.append,
    )
    report = await run_eval(parse_suite(SUITE), options)
    hello, bye = (cell.steps[0] for cell in report.cells)
    assert hello.reason is not None and hello.reason.startswith("MaxTurnsExceeded")
    assert "the check exited 2" in hello.reason
    assert (hello.turns, hello.tool_calls) == (3, 3)  # a run out of turns spent them
    assert bye.reason is not None and "HTTP 400: context too long" in bye.reason
    assert sum("why: MaxTurnsExceeded" in line for line in lines) == 1


def test_the_report_header_states_exactly_what_ran(
    tmp_path: Path, suite: Path, fake_openai: FakeOpenAIServer
) -> None:
    fake_openai.handler = agent
    out = tmp_path / "out"
    args = ("--model", "m1", "--max-tokens", "77", "--max-turns", "4", "--task", "hello")
    result = sandmem_eval(suite, out, *args, server=fake_openai.base_url)
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    header = md.split("Figures are medians", 1)[0]
    url = fake_openai.base_url.rstrip("/")
    assert f"- agent: `m1` (chat_completions API at {url})" in header
    assert "- memory: not used (no memory condition)" in header
    assert "- suite: `traps` (digest " in header and "tasks `hello` (" in header
    assert "`bye`" not in header  # only what ran
    assert "- conditions: no-memory" in header
    assert "- repetitions: 1 per task and condition" in header
    assert "- limits: 4 turns per run; per request: at most 77 output tokens" in header
    assert "- cells: 1 run by this eval, 0 reused" in header
    assert "Model `" not in md and "scripted" not in header
    html = (out / "report.html").read_text()
    assert "<code>m1</code> (chat_completions API at" in html
    # the cap was sent on every agent request
    sent = [
        r.body.get("max_completion_tokens", r.body.get("max_tokens")) for r in fake_openai.requests
    ]
    assert len(sent) > 1 and all(cap == 77 for cap in sent[1:]), sent
    # the CLI ends with the same lines
    assert f"agent: `m1` (chat_completions API at {url})" in result.output


def test_the_scripted_header_says_no_model_and_the_extractive_engine(
    tmp_path: Path, suite: Path
) -> None:
    out = tmp_path / "out"
    argv = ["eval", str(suite), "--out", str(out)]
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    md = (out / "report.md").read_text()
    assert "- agent: `scripted`: the deterministic policy shipped with sandmem" in md
    assert "- memory: the extractive engine (no model)" in md
    assert "- conditions: memory, no-memory" in md


async def test_a_memory_generation_timeout_stops_the_eval_and_the_setting_fixes_it(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    options = EvalOptions(out=out, conditions=("memory",), tasks=("hello",), flush_timeout_s=1e-9)
    with pytest.raises(EvalStopped) as stopped:
        await run_eval(parse_suite(SUITE), options)
    assert "hello-step1 is still pending after the session stopped" in str(stopped.value)
    assert "flush timeout" in str(stopped.value) and cells(out) == []
    options.flush_timeout_s = 120
    report = await run_eval(parse_suite(SUITE), options)
    assert report.ran == 1 and report.cells[0].steps[0].success


async def test_the_check_passes_a_model_that_answers_but_unusably(tmp_path: Path) -> None:
    """A reasoning model can spend the check's small cap before any text (an unusable answer):
    the server, the key and the model answered, which is what the check is for. A refused
    request still stops."""
    from sandmem._errors import ModelBehaviorError

    def respond(request: ModelRequest) -> Any:
        if request.input and request.input[-1].get("content") == CHECK_PROMPT:
            raise ModelBehaviorError("the answer was cut off at max_tokens=16")
        outputs = [i for i in request.input if i.get("type") == "function_call_output"]
        if outputs:
            return [text("OK")]
        return [tool_call("exec_command", {"cmd": "echo hello > hello.txt"})]

    class Provider(ModelProvider):
        def get_model(self, name: str | None) -> FunctionModel:
            return FunctionModel(respond, name=name or "m")

    options = EvalOptions(
        out=tmp_path, model="m", conditions=("no-memory",), tasks=("hello",), provider=Provider()
    )
    report = await run_eval(parse_suite(SUITE), options)
    assert report.cells[0].steps[0].success


async def test_a_setup_error_in_concurrent_cells_is_raised_as_itself(tmp_path: Path) -> None:
    """With cells running side by side, the first setup error stops the others and is raised
    as ``EvalStopped`` (not an exception group); the other cell's file is not written either
    when it was cut short."""

    def respond(request: ModelRequest) -> Any:
        first = str(request.input[0].get("content")) if request.input else ""
        if request.input and request.input[-1].get("content") == CHECK_PROMPT:
            return [text("OK")]
        if "bye" in first:
            raise ModelRequestError("HTTP 503: overloaded", status_code=503, retryable=True)
        outputs = [i for i in request.input if i.get("type") == "function_call_output"]
        if outputs:
            return [text("OK")]
        return [tool_call("exec_command", {"cmd": "echo hello > hello.txt"})]

    class Provider(ModelProvider):
        def get_model(self, name: str | None) -> FunctionModel:
            return FunctionModel(respond, name=name or "m")

    options = EvalOptions(
        out=tmp_path,
        model="m",
        conditions=("no-memory",),
        repeat=2,
        concurrency=4,
        provider=Provider(),
    )
    with pytest.raises(EvalStopped) as stopped:
        await run_eval(parse_suite(SUITE), options)
    assert stopped.value.cell is not None and stopped.value.cell.startswith("bye.no-memory.")
    assert "HTTP 503" in stopped.value.reason
    assert not any(name.startswith("bye.") for name in cells(tmp_path))


def test_memory_problems_tell_setup_errors_from_task_outcomes() -> None:
    from types import SimpleNamespace as NS

    from sandmem.eval._step import memory_problems

    def conv(status: str, error: str | None = None, kind: str | None = None) -> NS:
        return NS(rollout_id="r", status=status, last_error=error, failure_kind=kind)

    def found(*convs: NS, last: NS | None = None) -> NS:
        return NS(conversations=list(convs), last_consolidation=last)

    assert memory_problems(None) == (None, None)
    assert memory_problems(found(conv("done"), conv("skipped"))) == (None, None)
    setup, note = memory_problems(found(conv("pending")))
    assert setup is not None and "still pending" in setup and note is None
    setup, note = memory_problems(found(conv("failed", "bad JSON", "rollout")))
    assert setup is None and note == "phase one failed for r: bad JSON"
    setup, note = memory_problems(found(conv("pending", "HTTP 503", "environment")))
    assert setup == "memory generation failed: phase one pending for r: HTTP 503" and note is None
    setup, _ = memory_problems(found(conv("failed", "HTTP 401", "configuration")))
    assert setup is not None and "401" in setup
    incomplete = NS(status="incomplete", error="not folded in: r", failure_kind=None)
    assert memory_problems(found(last=incomplete)) == (
        None,
        "phase two incomplete: not folded in: r",
    )
    refused = NS(status="failed", error="HTTP 404 model", failure_kind="configuration")
    setup, note = memory_problems(found(last=refused))
    assert setup == "memory generation failed: phase two failed: HTTP 404 model" and note is None
    done = NS(status="done", error=None, failure_kind=None)
    assert memory_problems(found(conv("done"), last=done)) == (None, None)
