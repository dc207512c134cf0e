"""The viewer's history view: the versions of memory as a timeline with their attribution,
and the diff of each against the version before it (newest first; redacted like the rest of
the page; the newest ``HISTORY_SHOWN`` versions)."""

from __future__ import annotations

import html
from typing import Any

from sandmem._truncate import truncate_head_tail
from sandmem.memory import history
from sandmem.memory.layout import MemoryPaths
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession

HISTORY_SHOWN = 50
_DIFF_MAX_TOKENS = 8_000


async def collect_history(
    session: SandboxSession, paths: MemoryPaths, redactor: Redactor
) -> list[dict[str, Any]]:
    """The newest versions as plain dicts (attribution fields, ``changed``, ``diff``)."""
    found = await history.versions(session, paths)
    by_seq = {v.seq: v for v in found}
    rows: list[dict[str, Any]] = []
    for version in found[:HISTORY_SHOWN]:
        parent = by_seq.get(version.parent) if version.parent is not None else None
        before = await history.version_files(session, paths, parent) if parent else {}
        after = await history.version_files(session, paths, version)
        changed, text = history.unified(before, dict(after))
        rows.append(
            {
                "version": version.seq,
                "time": version.time,
                **version.attribution.to_json(),
                "redacted": version.redacted,
                "changed": changed,
                "diff": redactor.redact(truncate_head_tail(text, _DIFF_MAX_TOKENS, what="diff")),
            }
        )
    return rows


def _who(row: dict[str, Any]) -> str:
    parts = []
    engine, model = row.get("engine"), row.get("model")
    if model:
        parts.append(model if model == engine else f"{engine or 'model'}: {model}")
    added, removed = row.get("rollouts_added") or [], row.get("rollouts_removed") or []
    parts += [f"+{r}" for r in added] + [f"-{r}" for r in removed]
    for key in ("run", "client", "proposal", "restored_from"):
        if row.get(key) is not None:
            parts.append(f"{key.replace('_', ' ')} {row[key]}")
    if row.get("redacted"):
        parts.append("redacted")
    return " · ".join(parts)


def _diff_html(text: str) -> str:
    lines = []
    for line in text.splitlines():
        cls = ""
        if line.startswith("+") and not line.startswith("+++"):
            cls = "add"
        elif line.startswith("-") and not line.startswith("---"):
            cls = "del"
        escaped = html.escape(line)
        lines.append(f'<span class="{cls}">{escaped}</span>' if cls else escaped)
    return '<pre class="diff">' + "\n".join(lines) + "</pre>"


def render_history(rows: list[dict[str, Any]], memories_dir: str) -> str:
    """The ``#history`` section (empty string when there is no history)."""
    if not rows:
        body = '<p class="empty">No versions yet: the first change to memory makes version 1.</p>'
    else:
        items = []
        for row in rows:
            changed = ", ".join(row.get("changed") or []) or "conversations state only"
            items.append(
                f'<details class="version" id="v{int(row["version"])}"><summary>'
                f"<strong>v{int(row['version'])}</strong> {html.escape(str(row['time'])[:16])} "
                f'<span class="badge">{html.escape(str(row["kind"]))}</span> '
                f"{html.escape(_who(row))} — {html.escape(changed)}</summary>"
                f"{_diff_html(str(row.get('diff') or ''))}</details>"
            )
        body = "".join(items)
    note = (
        f'<p class="note">{len(rows)} newest version(s) from {html.escape(memories_dir)}/'
        f"{history.HISTORY_DIR}/; `sandmem memory diff A B` and `restore N` work on them.</p>"
    )
    return f'<section id="history"><h2>History</h2>{note}{body}</section>'
