"""The memory viewer page: ``ViewerData`` in, one self-contained HTML document out.

``build_page`` reads a layout (``_viewer.collect``) and renders it; ``render_page`` is pure: no
I/O but the template (package data ``assets/viewer.html``, holding the CSS and the
small script). Every value from the workspace is HTML-escaped; charts are inline SVG; the page
loads nothing (no links to other hosts, no external assets).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

from sandmem._log_lines import human_size
from sandmem.memory.layout import SUMMARIES_DIR
from sandmem.memory.views._viewer import SizePoint, Summary, ViewerData, collect
from sandmem.memory.views._viewer_history import render_history
from sandmem.memory.views._viewer_md import SUMMARY_REF, inline, markdown, task_groups

if TYPE_CHECKING:
    from sandmem.memory.layout import MemoryPaths
    from sandmem.sandboxes._session import SandboxSession

#: generation log records further apart than this start a new generation run
RUN_GAP_S = 300.0
_STATUSES = ("done", "pending", "failed", "skipped")


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def anchor(path: str) -> str:
    """The element id of a rollout summary's section."""
    return "rs-" + re.sub(r"[^A-Za-z0-9_-]", "-", path.removeprefix(f"{SUMMARIES_DIR}/"))


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def _short_time(value: Any) -> str:
    parsed = _time(value)
    return parsed.strftime("%Y-%m-%d %H:%M:%S") if parsed else _e(value or "—")


def _section(ident: str, title: str, body: str, note: str = "") -> str:
    hint = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{ident}"><h2>{_e(title)}</h2>{hint}{body}</section>'


# ---------------------------------------------------------------- summary and MEMORY.md


def _summary(data: ViewerData) -> str:
    if not data.summary_injected:
        body = '<p class="empty">memory_summary.md is empty: nothing is injected into runs.</p>'
        return _section("summary", "Summary as injected", body)
    size = data.summary_bytes  # the file's own size, as `sandmem memory tree` reports it
    cut = data.summary_injected != data.summary
    prompt = (
        '<details id="memory-prompt"><summary>The whole memory prompt a run receives '
        "(<code>MemoryReadConfig(live_update=True)</code>)</summary>"
        f"<pre>{_e(data.memory_prompt)}</pre></details>"
        if data.memory_prompt
        else ""
    )
    note = (
        f"{_e(data.memories_dir)}/memory_summary.md, {human_size(size)}"
        + (", cut to 15,000 tokens (head and tail) as every run receives it" if cut else "")
        + ". It is placed in each run's instructions inside the memory prompt."
    )
    return _section(
        "summary", "Summary as injected", f"<pre>{_e(data.summary_injected)}</pre>{prompt}", note
    )


def _citations(data: ViewerData) -> dict[str, list[int]]:
    """Rollout summary path → the task groups (1-based) that cite it."""
    _, groups = task_groups(data.memory_md)
    cited: dict[str, list[int]] = {}
    for number, (title, body) in enumerate(groups, 1):
        for ref in dict.fromkeys(SUMMARY_REF.findall(title + "\n" + body)):
            cited.setdefault(ref, []).append(number)
    return cited


def _memory(data: ViewerData) -> str:
    known = {s.path for s in data.summaries}

    def link(ref: str) -> str | None:
        return anchor(ref) if ref in known else None

    preamble, groups = task_groups(data.memory_md)
    if not data.memory_md.strip():
        body = '<p class="empty">MEMORY.md is empty.</p>'
        return _section("memory", "MEMORY.md", body)
    parts = [markdown(preamble, link, shift=2)] if preamble.strip() else []
    for number, (title, text) in enumerate(groups, 1):
        refs = list(dict.fromkeys(SUMMARY_REF.findall(title + "\n" + text)))
        chips = "".join(
            f'<a class="chip" href="#{anchor(r)}">{_e(r.removeprefix(f"{SUMMARIES_DIR}/"))}</a>'
            if r in known
            else f'<span class="chip missing" title="not on disk">{_e(r)}</span>'
            for r in refs
        )
        sources = f'<div class="sources">Sources: {chips}</div>' if refs else ""
        parts.append(
            f'<article class="group" id="group-{number}"><h3>{inline(title, link)}</h3>'
            f"{sources}{markdown(text, link, shift=2)}</article>"
        )
    note = f"{len(groups)} task group(s); each links to the rollout summaries it cites."
    return _section("memory", "MEMORY.md", "\n".join(parts), note)


# ---------------------------------------------------------------- conversations and selection


def _conversation_row(row: dict[str, Any], memories_dir: str) -> str:
    rid = str(row.get("rollout_id"))
    status = str(row.get("status"))
    error = row.get("last_error")
    error_cell = f'<span title="{_e(error)}">{_e(row.get("error_class"))}</span>' if error else "—"
    summary = row.get("summary_file")
    path = str(summary).removeprefix(f"{memories_dir}/") if summary else None
    rid_cell = f'<a href="#{anchor(path)}">{_e(rid)}</a>' if path else _e(rid)
    tokens = f"{row.get('input_tokens', 0)} / {row.get('output_tokens', 0)}"
    return (
        f'<tr data-status="{_e(status)}"><td class="id">{rid_cell}</td>'
        f'<td><span class="badge {_e(status)}">{_e(status)}</span></td>'
        f"<td>{_e(row.get('task') or '—')}</td>"
        f"<td>{_e(row.get('attempts'))}</td><td>{error_cell}</td>"
        f"<td>{_short_time(row.get('updated_at'))}</td><td>{_e(row.get('segments'))}</td>"
        f"<td>{_e(row.get('terminal_state') or '—')}</td><td>{_e(tokens)}</td></tr>"
    )


def _conversations(data: ViewerData) -> str:
    rows = data.conversations
    if not rows:
        return _section("conversations", "Conversations", '<p class="empty">none recorded</p>')
    counts = {s: sum(1 for r in rows if r.get("status") == s) for s in _STATUSES}
    buttons = '<button type="button" data-filter="all" class="on">all</button>' + "".join(
        f'<button type="button" data-filter="{s}">{s} ({n})</button>'
        for s, n in counts.items()
        if n
    )
    head = (
        "<tr><th>rollout</th><th>status</th><th>task</th><th>attempts</th><th>last error</th>"
        "<th>updated</th><th>segments</th><th>terminal state</th>"
        "<th>tokens in / out</th></tr>"
    )
    body = "".join(_conversation_row(r, data.memories_dir) for r in rows)
    table = (
        f'<div class="filters" id="status-filters">{buttons}</div>'
        f'<table id="conversations-table"><thead>{head}</thead><tbody>{body}</tbody></table>'
    )
    note = (
        f"{len(rows)} conversation(s) in {_e(data.sessions_dir)}/, newest first (as `sandmem "
        "memory list`). "
        "pending: extracted at the next generation; failed: gave up after max_attempts."
    )
    if data.pages > 1:
        note += (
            f" Page {data.page} of {data.pages} ({data.total} conversations, newest pages "
            f"first): `sandmem memory view --page N` writes page N; this page holds only the "
            "rollout summaries and runs of its conversations and those MEMORY.md cites."
        )
    return _section("conversations", "Conversations", table, note)


def _selection(data: ViewerData) -> str:
    if not data.selection:
        body = '<p class="empty">no consolidation has succeeded yet</p>'
        return _section("selection", "Selection", body)
    cols = []
    for key, ids in data.selection.items():
        items = "".join(f"<li>{_e(i)}</li>" for i in ids) or '<li class="empty">none</li>'
        cols.append(
            f'<div class="col {_e(key)}"><h3>{_e(key)} ({len(ids)})</h3><ul>{items}</ul></div>'
        )
    when = (
        f"Last consolidation: {_short_time(data.selection_updated_at)}. "
        if (data.selection_updated_at)
        else ""
    )
    note = when + "removed = forgotten: the consolidation dropped what only they supported."
    return _section("selection", "Selection", f'<div class="cols">{"".join(cols)}</div>', note)


# ---------------------------------------------------------------- generation runs


def generation_runs(log: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Log records grouped into generation runs (flushes): a run ends with its phase-two
    record, or when the next record comes more than ``RUN_GAP_S`` later."""
    runs: list[list[dict[str, Any]]] = []
    last: datetime | None = None
    for record in log:
        when = _time(record.get("time"))
        gap = when is not None and last is not None and (when - last).total_seconds() > RUN_GAP_S
        if not runs or gap or runs[-1][-1].get("phase") == "two":
            runs.append([])
        runs[-1].append(record)
        last = when or last
    return runs


def _tokens(records: list[dict[str, Any]], phase: str) -> int:
    total = 0
    for r in records:
        if r.get("phase") == phase:
            for key in ("input_tokens", "output_tokens"):
                value = r.get(key)
                total += value if isinstance(value, int) else 0
    return total


def _bars(runs: list[list[dict[str, Any]]]) -> str:
    width, height, pad = 720, 160, 24
    peak = max((_tokens(r, "one") + _tokens(r, "two") for r in runs), default=0) or 1
    step = (width - 2 * pad) / max(len(runs), 1)
    bar = max(min(step * 0.7, 48), 2)
    shapes = []
    for index, run in enumerate(runs):
        x = pad + index * step + (step - bar) / 2
        y = float(height - pad)
        for phase, css in (("one", "p1"), ("two", "p2")):
            value = _tokens(run, phase)
            h = (height - 2 * pad) * value / peak
            y -= h
            tip = f"run {index + 1}, phase {phase}: {value} tokens"
            shapes.append(
                f'<rect class="{css}" x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" '
                f'height="{max(h, 0):.1f}"><title>{_e(tip)}</title></rect>'
            )
        shapes.append(
            f'<text x="{x + bar / 2:.1f}" y="{height - 8}" text-anchor="middle">{index + 1}</text>'
        )
    axis = (
        f'<text x="{pad}" y="14">{peak} tokens</text>'
        if peak > 1
        else f'<text x="{pad}" y="14">no tokens recorded (the extractive engine spends none)</text>'
    )
    return (
        f'<svg class="chart" id="tokens-chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="tokens per generation run">{axis}{"".join(shapes)}</svg>'
        '<p class="legend"><span class="key p1"></span>phase one '
        '<span class="key p2"></span>phase two</p>'
    )


def _run_row(index: int, run: list[dict[str, Any]]) -> str:
    one = [r for r in run if r.get("phase") == "one"]
    two = [r for r in run if r.get("phase") == "two"]
    statuses: dict[str, int] = {}
    for r in one:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    one_cell = ", ".join(f"{n} {s}" for s, n in statuses.items()) or "—"
    two_cell = _e(two[-1].get("status")) if two else "not run"
    errors = [str(r.get("error")) for r in run if r.get("error")]
    error_cell = f'<span title="{_e("; ".join(errors))}">{len(errors)}</span>' if errors else "0"
    duration = sum(
        r.get("duration_s") or 0 for r in run if isinstance(r.get("duration_s"), int | float)
    )
    return (
        f"<tr><td>{index}</td><td>{_short_time(run[0].get('time'))}</td><td>{_e(one_cell)}</td>"
        f"<td>{_tokens(run, 'one')}</td><td>{two_cell}</td><td>{_tokens(run, 'two')}</td>"
        f"<td>{error_cell}</td><td>{duration:.2f}</td></tr>"
    )


def _timeline(data: ViewerData) -> str:
    runs = generation_runs(data.log)
    if not runs:
        body = '<p class="empty">generation_log.jsonl has no records yet</p>'
        return _section("timeline", "Generation runs", body)
    head = (
        "<tr><th>#</th><th>started</th><th>phase one (rollouts)</th><th>phase-one tokens</th>"
        "<th>phase two</th><th>phase-two tokens</th><th>errors</th><th>seconds</th></tr>"
    )
    rows = "".join(_run_row(i, run) for i, run in enumerate(runs, 1))
    body = f'{_bars(runs)}<table id="runs-table"><thead>{head}</thead><tbody>{rows}</tbody></table>'
    note = (
        f"{len(runs)} run(s) from {_e(data.memories_dir)}/generation_log.jsonl; "
        "tokens are input + output."
    )
    return _section("timeline", "Generation runs", body, note)


def _line_chart(points: list[SizePoint]) -> str:
    width, height, pad = 720, 160, 28
    times = [t.timestamp() for p in points if (t := _time(p.time)) is not None]
    if not times:
        return '<p class="empty">no dated sizes yet</p>'
    t0, t1 = min(times), max(times)
    peak = max(p.bytes for p in points) or 1
    lines = []
    for series, css in (("raw memories", "s1"), ("consolidated", "s2")):
        coords = []
        for p in points:
            when = _time(p.time)
            if p.series != series or when is None:
                continue
            x = pad + (width - 2 * pad) * ((when.timestamp() - t0) / (t1 - t0) if t1 > t0 else 0.5)
            y = height - pad - (height - 2 * pad) * p.bytes / peak
            coords.append((x, y, p))
        if coords:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coords)
            lines.append(f'<polyline class="{css}" points="{path}"/>')
            lines.extend(
                f'<circle class="{css}" cx="{x:.1f}" cy="{y:.1f}" r="3"><title>'
                f"{_e(series)}: {p.bytes} bytes at {_e(p.time)}</title></circle>"
                for x, y, p in coords
            )
    return (
        f'<svg class="chart" id="size-chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="memory size over time"><text x="{pad}" y="14">{peak} bytes</text>'
        f'{"".join(lines)}</svg><p class="legend"><span class="key s1"></span>raw memories '
        '(accumulated by their updated_at) <span class="key s2"></span>MEMORY.md + '
        "memory_summary.md after each consolidation</p>"
    )


def _sizes(data: ViewerData) -> str:
    return _section("sizes", "Memory size over time", _line_chart(data.sizes))


# ---------------------------------------------------------------- files


def _summary_article(summary: Summary, cited: list[int]) -> str:
    fields = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in summary.fields.items())
    back = " ".join(f'<a href="#group-{n}">task group {n}</a>' for n in cited)
    cited_by = (
        f'<p class="note">cited by {back}</p>'
        if back
        else ('<p class="note">not cited by MEMORY.md</p>')
    )
    return (
        f'<article class="rollout" id="{anchor(summary.path)}"><h3>{_e(summary.path)}</h3>'
        f"{cited_by}<dl>{fields}</dl>{markdown(summary.body, shift=2)}</article>"
    )


def _files(data: ViewerData) -> str:
    cited = _citations(data)
    articles = "".join(_summary_article(s, cited.get(s.path, [])) for s in data.summaries)
    body = articles or '<p class="empty">no rollout summaries</p>'
    out = _section("summaries", "Rollout summaries", body)
    if data.skills:
        skills = "".join(
            f'<article class="skill"><h3>{_e(p)}</h3>{markdown(t, shift=2)}</article>'
            for p, t in data.skills
        )
        out += _section("skills", "Skills", skills)
    if data.problems:
        items = "".join(f"<li>{_e(p)}</li>" for p in data.problems)
        out += _section("problems", "Files that could not be read", f"<ul>{items}</ul>")
    return out


def _template() -> str:
    return resources.files("sandmem.memory").joinpath("assets", "viewer.html").read_text("utf-8")


def render_page(data: ViewerData) -> str:
    """The whole page for ``data``."""
    header = (
        f"<header><h1>sandmem memory</h1><p>{_e(data.workspace)} · layout "
        f"<code>{_e(data.memories_dir)}</code> / <code>{_e(data.sessions_dir)}</code> · "
        f"generated {_short_time(data.generated_at)}</p></header>"
    )
    content = "".join(
        (
            header,
            _summary(data),
            _memory(data),
            _conversations(data),
            _selection(data),
            _timeline(data),
            _sizes(data),
            render_history(data.history, data.memories_dir),
            _files(data),
        )
    )
    head, tail = _template().split("{{content}}", 1)
    title = _e(f"sandmem memory: {data.workspace}")
    head = head.replace("{{title}}", title).replace("{{script_hash}}", _script_hash(tail))
    return head + content + tail


def _script_hash(tail: str) -> str:
    """The CSP source of the page's one script: only it may run, even if some text escaped
    the escaping."""
    script = tail.split("<script>", 1)[1].split("</script>", 1)[0]
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


async def build_page(
    session: SandboxSession,
    paths: MemoryPaths,
    *,
    workspace: str,
    page: int = 1,
    page_size: int | None = None,
) -> str:
    """The viewer page of ``paths`` in ``session``'s workspace (``workspace`` labels it);
    ``page``/``page_size`` as ``collect``."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    data = await collect(
        session, paths, workspace=workspace, generated_at=now, page=page, page_size=page_size
    )
    return render_page(data)
