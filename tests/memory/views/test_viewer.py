"""``sandmem memory view``: the page's content, its escaping and redaction, bad files, other
layouts, and (where Chromium is installed) that it renders with no console errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from viewer_workspace import HOSTILE, SECRET, build_viewer_workspace

from sandmem.memory.views._viewer_html import anchor, generation_runs
from sandmem.memory.views._viewer_md import markdown, task_groups

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cli"))
from cli_workspaces import INVOICE, build_workspace, invoke


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = build_viewer_workspace(tmp_path_factory.mktemp("viewer") / "ws")
    out = root.parent / "view.html"
    result = invoke("memory", "view", "-w", root, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"wrote {out.resolve()}"
    return root, out.read_text(encoding="utf-8")


ALLOWED_TAGS = {
    *("html", "head", "meta", "title", "style", "body", "nav", "main", "header", "section"),
    *("article", "h1", "h2", "h3", "h4", "h5", "h6", "p", "br", "ul", "ol", "li", "a"),
    *("code", "pre", "strong", "span", "div", "button", "table", "thead", "tbody", "tr"),
    *("th", "td", "dl", "dt", "dd", "svg", "rect", "text", "title", "polyline", "circle"),
    *("details", "summary", "script"),
}


class _TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, {k: v or "" for k, v in attrs}))


def _tags(html: str) -> list[tuple[str, dict[str, str]]]:
    collector = _TagCollector()
    collector.feed(html)
    return collector.tags


def _rows(html: str) -> dict[str, str]:
    return {
        m.group(2): m.group(0)
        for m in re.finditer(
            r'<tr data-status="(\w+)"><td class="id">(?:<a [^>]*>)?([\w.-]+).*?</tr>', html
        )
    }


def test_conversations_show_status_attempts_errors_and_dates(page: tuple[Path, str]) -> None:
    _, html = page
    rows = _rows(html)
    assert set(rows) == {"invoice-fix", "deploy-notes", "flaky-build", "later-question"}
    assert 'data-status="done"' in rows["invoice-fix"]
    assert 'data-status="failed"' in rows["flaky-build"]
    assert ">RuntimeError</span>" in rows["flaky-build"]
    assert "model server is down" in rows["flaky-build"]  # the whole error, as a tooltip
    assert "<td>1</td>" in rows["flaky-build"]  # one attempt
    assert 'data-status="pending"' in rows["later-question"]
    assert "<td>failed</td>" in rows["later-question"]  # how its last run ended
    assert "What changed? &lt;script&gt;" in rows["later-question"]  # its task, escaped
    assert "<td>Why does the build fail on Mondays?</td>" in rows["flaky-build"]
    assert '<a href="#rs-invoice-fix_' in rows["invoice-fix"]  # linked to its summary
    assert "2026-11-30 09:00:00" in rows["later-question"]
    assert 'data-filter="failed">failed (1)</button>' in html
    assert 'data-filter="pending">pending (1)</button>' in html


def test_memory_groups_link_to_the_rollout_summaries_they_cite(page: tuple[Path, str]) -> None:
    root, html = page
    summaries = sorted(p.name for p in (root / "memories/rollout_summaries").iterdir())
    assert len(summaries) == 2
    for name in summaries:
        target = anchor(f"rollout_summaries/{name}")
        assert f'id="{target}"' in html  # the summary's own section
        assert f'<a class="chip" href="#{target}">{name}</a>' in html  # a task group's source
    invoice = next(n for n in summaries if n.startswith("invoice-fix_"))
    body = (root / "memories/rollout_summaries" / invoice).read_text().split("\n\n", 1)[1]
    assert body.splitlines()[0].lstrip("# ") in html
    assert 'cited by <a href="#group-' in html
    # a citation of a file that does not exist is shown as missing, not as a dead link
    assert 'class="chip missing" title="not on disk">rollout_summaries/missing_file.md' in html


def test_summary_selection_runs_and_sizes(page: tuple[Path, str]) -> None:
    root, html = page
    summary = (root / "memories/memory_summary.md").read_text().strip()
    assert "Summary as injected" in html
    prompt = html.split('id="memory-prompt"')[1].split("</details>")[0]
    assert summary.splitlines()[0] in prompt and "memories/MEMORY.md" in prompt
    assert summary.splitlines()[0] in html
    assert "added (2)" in html and "retained (0)" in html and "removed (0)" in html
    added = html.split("added (2)")[1].split("</ul>")[0]
    assert "<li>deploy-notes</li>" in added and "<li>invoice-fix</li>" in added
    records = [
        json.loads(line)
        for line in (root / "memories/generation_log.jsonl").read_text().splitlines()
        if line.startswith("{")
    ]
    runs_table = html.split('id="runs-table"')[1].split("</table>")[0]
    assert runs_table.count("<tr>") == 1 + len(generation_runs(records)) == 3  # head + 2 runs
    assert "1 failed" in runs_table and "2 done" in runs_table
    chart = html.split('id="size-chart"')[1].split("</svg>")[0]
    assert chart.count('<circle class="s1"') == 2  # one point per raw memory
    assert chart.count('<circle class="s2"') == 1  # one per consolidation


def test_page_is_self_contained_escaped_and_redacted(page: tuple[Path, str]) -> None:
    _, html = page
    assert html.count("<script") == 1 and html.count("</script>") == 1  # only the page's own
    assert "&lt;script&gt;document.body.setAttribute(" in html
    assert "<img" not in html and "&lt;img src=x onerror=" in html
    assert SECRET not in html and "[REDACTED:" in html
    tags = _tags(html)
    assert {name for name, _ in tags} <= ALLOWED_TAGS
    for name, attrs in tags:
        assert not any(key.startswith("on") or key in ("src", "action") for key in attrs), name
        assert attrs.get("href", "#").startswith("#")  # in-page links only
    assert "<link" not in html and "url(" not in html and "@import" not in html
    assert "default-src 'none'" in html  # the CSP forbids every request


def test_bad_files_and_another_layout(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    mem, ses = root / "agent_mem", root / "agent_sessions"
    (mem / "rollout_summaries").mkdir(parents=True)
    ses.mkdir()
    (mem / "MEMORY.md").write_bytes(b"## Group \xff\xfe\n- rollout_summaries/x_y.md\n")
    (mem / "generation_state.json").write_text("{not json")
    (mem / "phase_two_selection.json").write_text("[1, 2]")
    (mem / "generation_log.jsonl").write_text('[]\n{"phase": "one", "time": 5}\n')
    (mem / "rollout_summaries/x_y.md").write_bytes(b"\x00\x01 binary")
    (ses / "x.jsonl").write_text("garbage\n")
    out = tmp_path / "out" / "page.html"
    args = ["--memories-dir", "agent_mem", "--sessions-dir", "agent_sessions"]
    result = invoke("memory", "view", "-w", root, *args, "--out", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"path": str(out.resolve())}
    html = out.read_text()
    assert "agent_mem" in html and "Group \ufffd\ufffd" in html
    assert f'href="#{anchor("rollout_summaries/x_y.md")}"' in html
    assert 'data-status="pending"' in html  # x: recorded, not extracted
    # the default layout is not there: the command says so instead of writing an empty page
    missing = invoke("memory", "view", "-w", root, "--out", tmp_path / "none.html")
    assert missing.exit_code == 1 and "no memory in" in missing.output


def test_markdown_renderer_escapes_everything() -> None:
    text = "# T <b>\n- `a<b>` **bold <i>**\n```\n<script>x</script> rollout_summaries/a.md\n```\n"
    html = markdown(text, lambda ref: "rs-a")
    assert "<b>" not in html and "<i>" not in html and "<script>" not in html
    assert "<code>a&lt;b&gt;</code>" in html and "<strong>bold &lt;i&gt;</strong>" in html
    assert '<a class="ref" href="#rs-a">rollout_summaries/a.md</a>' in html
    pre, groups = task_groups("intro\n## A\nx\n```\n## not a group\n```\n## B\n")
    assert pre == "intro" and [g[0] for g in groups] == ["A", "B"]


def test_generation_runs_split_at_phase_two_and_gaps() -> None:
    log = [
        {"phase": "one", "time": "2026-01-01T00:00:00Z"},
        {"phase": "two", "time": "2026-01-01T00:00:01Z"},
        {"phase": "one", "time": "2026-01-01T00:00:02Z"},
        {"phase": "one", "time": "2026-01-01T01:00:00Z"},
        {"phase": "one", "time": "bad"},
    ]
    assert [len(run) for run in generation_runs(log)] == [2, 1, 2]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed")
def test_page_renders_in_chromium_without_console_errors(tmp_path: Path) -> None:
    root = build_viewer_workspace(tmp_path / "ws")
    out = tmp_path / "view.html"
    assert invoke("memory", "view", "-w", root, "--out", out).exit_code == 0
    browser = [str(_chromium()), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*browser, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=60
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body is not None
    assert 'data-viewer="ready"' in body.group(0)  # the page's script ran ...
    assert 'data-rows="4"' in body.group(0)  # ... and saw every conversation
    assert "data-pwned" not in body.group(0)  # the hostile MEMORY.md did not run
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []  # no errors, no CSP violations, no messages at all
    shot = tmp_path / "viewer.png"  # kept as a test artefact in tmp_path
    taken = subprocess.run(
        [*browser, "--window-size=1200,2000", f"--screenshot={shot}", out.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert shot.stat().st_size > 10_000
    assert [line for line in taken.stderr.splitlines() if ":CONSOLE" in line] == []


def test_invoice_workspace_view_without_failures(tmp_path: Path) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE])
    out = tmp_path / "v.html"
    assert invoke("memory", "view", "-w", root, "-o", out).exit_code == 0
    html = out.read_text()
    assert 'data-filter="done">done (1)</button>' in html and "failed (" not in html


def test_open_flag_opens_the_written_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = build_workspace(tmp_path / "ws", [INVOICE])
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    out = tmp_path / "page.html"
    result = invoke("memory", "view", "-w", root, "-o", out, "--open")
    assert result.exit_code == 0, result.output
    assert opened == [out.resolve().as_uri()]
    assert "--open" in invoke("memory", "view", "--help").stdout


def test_timeline_bars_show_tokens_per_phase() -> None:
    from sandmem.memory.views._viewer import ViewerData
    from sandmem.memory.views._viewer_html import render_page

    log = [
        {"phase": "one", "time": "2026-01-01T00:00:00Z", "input_tokens": 300, "output_tokens": 30},
        {"phase": "one", "time": "2026-01-01T00:00:01Z", "input_tokens": 100, "output_tokens": 10},
        {"phase": "two", "time": "2026-01-01T00:00:02Z", "input_tokens": 500, "output_tokens": 50},
        {"phase": "one", "time": "2026-01-02T00:00:00Z", "input_tokens": 20, "output_tokens": 2},
        {"phase": "two", "time": "2026-01-02T00:00:01Z", "status": "done", "memory_bytes": 900},
    ]
    data = ViewerData("ws", "memories", "sessions", "2026-01-03T00:00:00Z", log=log)
    from sandmem.memory.views._viewer import _size_points

    data.sizes = _size_points(log, {})
    html = render_page(data)
    chart = html.split('id="tokens-chart"')[1].split("</svg>")[0]
    assert "990 tokens" in chart  # the tallest run: 440 + 550
    assert "run 1, phase one: 440 tokens" in chart and "run 1, phase two: 550 tokens" in chart
    assert "run 2, phase one: 22 tokens" in chart
    sizes = html.split('id="size-chart"')[1].split("</svg>")[0]
    assert "consolidated: 900 bytes" in sizes


def test_consolidations_log_memory_size_for_the_chart(page: tuple[Path, str]) -> None:
    root, html = page
    records = [
        json.loads(line)
        for line in (root / "memories/generation_log.jsonl").read_text().splitlines()
        if line.startswith("{")
    ]
    [two] = [r for r in records if r["phase"] == "two"]
    sizes = [(root / f"memories/{n}").stat().st_size for n in ("MEMORY.md", "memory_summary.md")]
    hostile = len(HOSTILE.encode())  # appended to MEMORY.md by hand after the consolidation
    assert two["memory_bytes"] == sum(sizes) - hostile
    chart = html.split('id="size-chart"')[1].split("</svg>")[0]
    assert f"consolidated: {two['memory_bytes']} bytes" in chart
