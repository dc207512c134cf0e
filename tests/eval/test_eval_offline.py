"""``sandmem eval`` offline: the built-in suite end to end with the scripted policy."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sandmem.eval import EvalOptions, EvalReport, run_eval


def _turns(report: EvalReport, task: str, condition: str) -> list[float]:
    summary = next(s for s in report.summaries if s.task == task and s.condition == condition)
    return [step["turns"] for step in summary.per_step]


@pytest.fixture(scope="module")
def aware(tmp_path_factory: pytest.TempPathFactory) -> tuple[EvalReport, Path]:
    import asyncio

    out = tmp_path_factory.mktemp("eval-aware")
    return asyncio.run(run_eval("builtin", EvalOptions(out=out))), out


def test_builtin_suite_runs_end_to_end_and_writes_three_reports(
    aware: tuple[EvalReport, Path],
) -> None:
    report, out = aware
    assert {p.name for p in out.iterdir()} >= {"report.json", "report.md", "report.html"}
    assert not (out / "work").exists()  # cell workspaces are removed
    data = json.loads((out / "report.json").read_text())
    assert data["model"] == "scripted"
    assert len(data["cells"]) == 2 * len({c["task"] for c in data["cells"]})
    assert all(step.success for cell in report.cells for step in cell.steps)
    markdown = (out / "report.md").read_text()
    assert "not a measure of any model" in markdown
    assert "| invoice-followup | memory |" in markdown
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 5 and "http" not in page.split("<svg", 1)[1].replace(
        "http://www.w3.org/2000/svg", ""
    )


def test_a_policy_that_uses_memory_takes_fewer_turns_with_memory(
    aware: tuple[EvalReport, Path],
) -> None:
    report, _ = aware
    totals = report.totals
    assert totals["memory"]["turns"].median < totals["no-memory"]["turns"].median
    assert totals["memory"]["interventions"].median < totals["no-memory"]["interventions"].median
    # the first step of every task has no memory yet: it costs the same in both conditions
    for task in {s.task for s in report.summaries}:
        assert _turns(report, task, "memory")[0] == _turns(report, task, "no-memory")[0]
    # the follow-up that memory is for is cheaper; the task where memory should not matter
    # is not
    assert (
        _turns(report, "invoice-followup", "memory")[1]
        < _turns(report, "invoice-followup", "no-memory")[1]
    )
    assert _turns(report, "memory-irrelevant", "memory") == _turns(
        report, "memory-irrelevant", "no-memory"
    )


async def test_a_policy_that_ignores_memory_shows_no_difference(tmp_path: Path) -> None:
    tasks = ("invoice-followup", "naming-correction", "stated-preference", "dead-end")
    options = EvalOptions(out=tmp_path, scripted_uses_memory=False, tasks=tasks)
    report = await run_eval("builtin", options)
    for task in {s.task for s in report.summaries}:
        assert _turns(report, task, "memory") == _turns(report, task, "no-memory"), task
    assert report.totals["memory"]["turns"] == report.totals["no-memory"]["turns"]


async def test_multi_agent_layouts_keep_separate_memories(tmp_path: Path) -> None:
    lines: list[str] = []
    options = EvalOptions(
        out=tmp_path,
        conditions=("memory",),
        tasks=("multi-agent",),
        progress=lines.append,
        keep_workspaces=True,
    )
    report = await run_eval("builtin", options)
    assert len(lines) == 3 and all(": ok in" in line for line in lines)
    assert report.cells[0].workspace is not None
    workspace = Path(report.cells[0].workspace)
    coder = (workspace / "memories/coder/MEMORY.md").read_text()
    reviewer = (workspace / "memories/reviewer/MEMORY.md").read_text()
    assert "multi-agent-step1" in coder and "multi-agent-step3" in coder
    assert "multi-agent-step2" in reviewer
    assert "multi-agent-step2" not in coder and "multi-agent-step1" not in reviewer
    assert sorted(p.name for p in (workspace / "sessions/coder").glob("*.jsonl")) == [
        "multi-agent-step1.jsonl",
        "multi-agent-step3.jsonl",
    ]
    # step 3 (coder again) recalled its own memory: fewer turns than step 1
    steps = report.cells[0].steps
    assert steps[2].turns < steps[0].turns


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_the_bwrap_backend_runs_the_same_cells(tmp_path: Path) -> None:
    options = EvalOptions(out=tmp_path, backend="bwrap", tasks=("stale-memory",))
    report = await run_eval("builtin", options)
    assert [cell.condition for cell in report.cells] == ["memory", "no-memory"]
    assert all(step.success for cell in report.cells for step in cell.steps)


# ---------------------------------------------------------------- the HTML report in a browser

#: measures the page once laid out, and writes what it found into <body data-check="...">
_MEASURE = """<script>
window.addEventListener("load", () => {
  const found = {cut: [], overlaps: [], tables: [], wrapped: [], raw_markdown: false};
  document.querySelectorAll("svg").forEach((svg) => {
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll("text")].map((t) => [t.textContent, t.getBBox()]);
    for (const [text, b] of texts) {
      if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > box.width + 0.5
          || b.y + b.height > box.height + 0.5) found.cut.push(text);
    }
    for (let i = 0; i < texts.length; i++) for (let j = i + 1; j < texts.length; j++) {
      const [ta, a] = texts[i], [tb, b] = texts[j];
      if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height
          && b.y < a.y + a.height) found.overlaps.push(ta + " / " + tb);
    }
  });
  document.querySelectorAll("table").forEach((table) => {
    const rows = [...table.rows].filter((r) => r.getBoundingClientRect().height > 0);
    const cols = Math.max(...rows.map((r) => r.cells.length));
    found.tables.push([rows.length, cols, table.getBoundingClientRect().width]);
    table.querySelectorAll("tbody td").forEach((td) => {
      const range = document.createRange();
      range.selectNodeContents(td);
      const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
      if (lines.size > 1) found.wrapped.push(td.textContent);
    });
  });
  found.raw_markdown = document.body.innerText.includes("|---");
  document.body.setAttribute("data-check", JSON.stringify(found));
});
</script>"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _headless(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_html_report_renders_tables_and_uncut_labels_in_chromium(
    aware: tuple[EvalReport, Path], tmp_path: Path
) -> None:
    """Issue 29: headless Chromium lays the page out; no chart label or value leaves its
    drawing or overlaps another, the figures are real tables (no Markdown as text), and a
    screenshot is taken."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed")
    _, out = aware
    page = (out / "report.html").read_text()
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _MEASURE + "</body>"))
    dumped = _headless(browser, "--window-size=1280,2000", "--dump-dom", probe.as_uri())
    match = re.search(r'data-check="([^"]*)"', dumped.stdout)
    assert match, dumped.stdout[-2000:] + dumped.stderr[-2000:]
    found = json.loads(html.unescape(match.group(1)))
    assert found["cut"] == [] and found["overlaps"] == []
    assert found["wrapped"] == []  # a task or condition name is never broken at its hyphen
    assert not found["raw_markdown"]
    tasks = len({c["task"] for c in json.loads((out / "report.json").read_text())["cells"]})
    assert [t[:2] for t in found["tables"]] == [[3, 11], [2 * tasks + 1, 12]]
    shot = tmp_path / "report.png"
    taken = _headless(browser, "--window-size=1280,2000", f"--screenshot={shot}", probe.as_uri())
    assert shot.is_file() and shot.stat().st_size > 10_000, taken.stderr[-2000:]


async def test_a_rerun_says_it_reuses_cells_and_fresh_runs_them_again(tmp_path: Path) -> None:
    lines: list[str] = []
    options = EvalOptions(out=tmp_path, tasks=("memory-irrelevant",), progress=lines.append)
    await run_eval("builtin", options)
    assert not any(line.startswith("reusing") for line in lines)
    lines.clear()
    await run_eval("builtin", options)
    assert lines == [
        f"reusing 2 finished cell(s) from {tmp_path / 'cells'} made with the same models, "
        "server, suite and tasks; pass --fresh to run them again"
    ]
    lines.clear()
    options.fresh = True
    await run_eval("builtin", options)
    assert lines and not any(line.startswith("reusing") for line in lines)
