"""Recording transcripts of other agents as memory conversations, only what is new.

For every source session: its rollout id comes from the source's own session id (so it is
the same at every ingest); the last segment recorded from that source says how far into it
earlier ingests reached (``source.through``: a line count and byte offset with a hash of the
bytes before it, a list length with a hash of the items, or a database row id), so an ingest
records only what was appended since, and nothing twice — the rollout file itself is the
bookkeeping, there is no second state file to get out of step with it. Segments go through
``memory.recording`` (redaction, then an append under the sessions lock); the
whole ingest holds ``<sessions_dir>/.ingest.lock`` so two ingests never record the same lines.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sandmem.memory import _files, tombstones
from sandmem.memory.ingestion import _detect, _sqlite
from sandmem.memory.ingestion._claude import claude_events
from sandmem.memory.ingestion._codex import codex_events, subagent_parent
from sandmem.memory.ingestion._items import Element, item_events
from sandmem.memory.ingestion._lines import LineReader, decode_line, tail_digest
from sandmem.memory.ingestion._model import Event, Line, SourceMeta
from sandmem.memory.ingestion._open import open_regular
from sandmem.memory.ingestion._report import IngestedSource, IngestReport
from sandmem.memory.ingestion._segments import Draft, drafts, segment_of
from sandmem.memory.layout import INGEST_LOCK, read_text
from sandmem.memory.recording import RolloutRecorder
from sandmem.memory.rollouts import conversation_rollout_id, parse_rollout

#: the rollout id prefix of each format (``codex-<session id>``, ``claude-<session id>``, ...)
PREFIX = {
    "codex": "codex",
    "claude-code": "claude",
    "openai-agents": "agents",
    "responses": "responses",
    "chat": "chat",
}
#: the files a directory given to ingest contributes
SOURCE_SUFFIXES = (".jsonl", ".json", ".db", ".sqlite", ".sqlite3")
#: segment bytes recorded per source session per ingest; the rest waits for the next ingest
MAX_INGEST_BYTES = 32 * 1024 * 1024
#: characters of a source's title kept in a segment (every segment of a session carries it)
MAX_TITLE_CHARS = 512
#: characters of a source's session id, path and working directory kept in a segment
MAX_SOURCE_FIELD_CHARS = 4096


def _capped(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters (an ellipsis marks a cut)."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def expand(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files to ingest: each file as given, and the transcript files under each directory
    (hidden ones left out), in a stable order."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser()
        if path.is_dir():
            # shallower files first: a session before its sub-agents' files
            found.extend(
                sorted(
                    (
                        p
                        for p in path.rglob("*")
                        if p.suffix in SOURCE_SUFFIXES
                        and p.is_file()
                        and not any(part.startswith(".") for part in p.relative_to(path).parts)
                    ),
                    key=lambda p: (len(p.parts), str(p)),
                )
            )
        else:
            found.append(path)
    return found


@dataclass
class _Stream:
    """One source session inside a file."""

    path: Path
    format: str
    session_id: str
    stream: str
    rollout_id: str
    conversation_key: str | None
    #: the latest ``updated_at`` of the conversation's segments (read with ``through``)
    latest: str | None = None


@dataclass
class _Plan:
    meta: SourceMeta
    drafts: list[Draft]
    throughs: list[dict[str, Any]]
    pending_bytes: int = 0
    more: bool = False


class Ingestor:
    """Ingests files into one layout through ``recorder``."""

    def __init__(
        self,
        recorder: RolloutRecorder,
        *,
        format: str = "auto",
        sessions: Sequence[str] | None = None,
        max_bytes: int = MAX_INGEST_BYTES,
        max_title_chars: int = MAX_TITLE_CHARS,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.recorder = recorder
        self.format = format
        self.sessions = set(sessions) if sessions else None
        self.max_bytes = max_bytes
        self.max_title_chars = max_title_chars
        #: only sessions whose working directory is this directory or inside it
        self.cwd = os.path.normpath(os.path.abspath(os.fspath(cwd))) if cwd is not None else None
        #: conversations ``forget`` noted: never recorded again (``forget --undo`` lifts it)
        self.forgotten: dict[str, tombstones.Tombstone] = {}

    async def run(self, paths: Iterable[str | os.PathLike[str]]) -> IngestReport:
        report = IngestReport()
        session, layout = self.recorder.session, self.recorder.paths
        await self.recorder.prepare()
        files = await asyncio.to_thread(expand, paths)
        lock = f"{layout.sessions_dir}/{INGEST_LOCK}"
        async with _files.lock(session, lock):
            self.forgotten = await tombstones.load(session, layout)
            for path in files:
                try:
                    report.sources.extend(await self._file(path))
                except Exception as exc:  # one bad file never stops the others
                    report.sources.append(
                        IngestedSource(
                            path=str(path),
                            status="failed",
                            # an error's text may quote the transcript (a secret in a bad line)
                            error=self.recorder.redactor.redact(f"{type(exc).__name__}: {exc}"),
                        )
                    )
        return report

    # ------------------------------------------------------------ one file

    async def _file(self, path: Path) -> list[IngestedSource]:
        if not await asyncio.to_thread(path.is_file):
            return [_skipped(path, await asyncio.to_thread(_not_a_file, path))]
        detection = await asyncio.to_thread(_detect.detect, path)
        found = detection.format
        fmt = self.format
        if fmt == "auto":
            if found is None:
                return [_skipped(path, f"cannot tell the format: {detection.why}; pass --format")]
            fmt = found
        if detection.sqlite:
            if fmt != "openai-agents":
                return [_skipped(path, f"a SQLite database is not {fmt}; use openai-agents")]
            return await self._database(path)
        document = fmt == "document" or (
            found == "document" and fmt in ("openai-agents", "responses", "chat")
        )
        if fmt == "openai-agents":
            fmt = "responses"  # to_input_list() items written one a line
        if fmt in _detect.ITEM_FORMATS or document:
            kept = await self._kept_format(path, None if fmt == "document" else fmt)
            if isinstance(kept, IngestedSource):
                return [kept]
            fmt = kept or fmt
        if document:
            return [await self._document(path, None if fmt == "document" else fmt)]
        return [await self._jsonl(path, fmt, detection.objects)]

    async def _kept_format(self, path: Path, fmt: str | None) -> str | IngestedSource | None:
        """The format an earlier ingest of this item-list file decided (its conversation,
        ``responses-<file>`` or ``chat-<file>``, already holds segments of it): kept, so a file
        that gains a tool call or is truncated is never read again under a new name. A format
        asked for that differs from the kept one is refused (``failed``)."""
        recorded = [
            name
            for name in _detect.ITEM_FORMATS
            if await self._through(self._stream(path, name, path.stem, "")) is not None
        ]
        if not recorded or fmt in recorded:
            return fmt if recorded else None
        if self.format in ("auto", "document"):
            return recorded[0]
        return _failed(
            path,
            f"this file was ingested as {recorded[0]}, not {fmt}: its format is kept so that "
            "nothing is recorded twice; forget the conversation to ingest it as another format",
            self._stream(path, recorded[0], path.stem, ""),
        )

    async def _jsonl(self, path: Path, fmt: str, head: list[dict[str, Any]]) -> IngestedSource:
        session_id, suffix = _identity(fmt, path, head)
        stream = self._stream(path, fmt, session_id, suffix)
        if self.sessions is not None and session_id not in self.sessions:
            return _skipped(path, f"session {session_id} was not asked for", stream)
        through = await self._through(stream)
        offset = through.get("offset") if through else None
        if through is not None and isinstance(offset, int) and offset > 0:
            digest = await asyncio.to_thread(tail_digest, path, offset)
            if digest != through.get("tail_sha256"):
                return _failed(
                    path,
                    "the file changed before the part already ingested "
                    "(rewritten or truncated): not ingested again, so nothing is "
                    "recorded twice; forget the conversation to ingest it anew",
                    stream,
                )
        start = int(through["pos"]) if through and isinstance(through.get("pos"), int) else 0
        plan = await asyncio.to_thread(self._plan_jsonl, stream, start)
        return await self._record(stream, plan)

    def _plan_jsonl(self, stream: _Stream, start: int) -> _Plan:
        meta = SourceMeta(stream.format, session_id=stream.session_id, stream=stream.stream)
        meta.count_from = start
        with open_regular(stream.path) as handle:
            reader = LineReader(handle, meta)
            events = _parser(stream.format)(reader, meta)
            kept, more = _take(events, start, self.max_bytes)
            pending = 0 if more else reader.pending_bytes
        found = drafts(kept)
        throughs = []
        for draft in found:
            end = draft.last_end or 0
            throughs.append(
                {
                    "pos": draft.last_pos + 1,
                    "offset": end,
                    "tail_sha256": tail_digest(stream.path, end),
                }
            )
        return _Plan(meta, found, throughs, pending, more)

    async def _document(self, path: Path, fmt: str | None) -> IngestedSource:
        try:
            data = await asyncio.to_thread(_detect.load_document, path)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _skipped(path, f"not a transcript: not JSON, JSON Lines or SQLite ({exc})")
        items = _detect.document_items(data)
        if items is None:
            return _skipped(path, "a JSON document that is not a list of items or messages")
        fmt = fmt or _detect.document_format(items)
        if fmt is None:
            return _skipped(
                path,
                "cannot tell the format: the JSON list holds neither "
                "Responses items nor chat messages; pass --format",
            )
        if fmt == "openai-agents":
            fmt = "responses"
        stream = self._stream(path, fmt, path.stem, "")
        through = await self._through(stream)
        start = int(through["pos"]) if through and isinstance(through.get("pos"), int) else 0
        digests = _prefix_digests(items)
        if through and digests.get(start) != through.get("items_sha256"):
            return _failed(
                path,
                "the items already ingested changed (the list was rewritten "
                "other than by appending): not ingested again",
                stream,
            )
        meta = SourceMeta(fmt, session_id=path.stem, stream=stream.stream)
        elements = [(i, None, value) for i, value in enumerate(items) if i >= start]
        kept, more = _take(item_events(elements, meta), start, self.max_bytes)
        found = drafts(kept)
        throughs = [
            {"pos": d.last_pos + 1, "items_sha256": digests.get(d.last_pos + 1)} for d in found
        ]
        return await self._record(stream, _Plan(meta, found, throughs, 0, more))

    async def _database(self, path: Path) -> list[IngestedSource]:
        results = []
        for session_id in await asyncio.to_thread(_sqlite.session_ids, path):
            stream = self._stream(path, "openai-agents", session_id, "")
            if self.sessions is not None and session_id not in self.sessions:
                continue
            through = await self._through(stream)
            after = int(through["pos"]) if through and isinstance(through.get("pos"), int) else 0
            rows, left = await asyncio.to_thread(_sqlite.session_rows, path, session_id, after)
            meta = SourceMeta("openai-agents", session_id=session_id, stream=stream.stream)
            for _, _, value in rows:
                if value is None:
                    meta.drop("malformed_row")
            elements: list[Element] = [(i, t, v) for i, t, v in rows if v is not None]
            kept, more = _take(item_events(elements, meta), after, self.max_bytes)
            found = drafts(kept)
            throughs = [{"pos": d.last_pos} for d in found]
            results.append(
                await self._record(stream, _Plan(meta, found, throughs, 0, more or left > 0))
            )
        if self.sessions is not None and not results:
            results.append(_skipped(path, "none of the asked-for sessions is in this database"))
        return results

    # ------------------------------------------------------------ bookkeeping and recording

    def _stream(self, path: Path, fmt: str, session_id: str, suffix: str) -> _Stream:
        """The source stream and its conversation. A session id holding a secret never
        names a file: its rollout id is then the prefix and 16 hex of its SHA-256, and what
        is written of it (``conversation_key``, ``stream``) is redacted."""
        key_text = f"{PREFIX[fmt]}-{session_id}"
        redact = self.recorder.redactor.redact_name
        key: str | None
        if redact(key_text) != key_text:
            digest = hashlib.sha256(key_text.encode("utf-8", "surrogatepass")).hexdigest()
            rollout_id, key = f"{PREFIX[fmt]}-{digest[:16]}", redact(key_text)
        else:
            rollout_id, key = conversation_rollout_id(key_text)
        stream = redact(f"{fmt}:{session_id}{suffix}")
        return _Stream(path, fmt, session_id, stream, rollout_id, key)

    async def _through(self, stream: _Stream) -> dict[str, Any] | None:
        """How far the last segment recorded from this source reached, or ``None``; notes the
        conversation's latest ``updated_at`` in ``stream.latest``."""
        session, layout = self.recorder.session, self.recorder.paths
        text = await read_text(session, layout.rollout_file(stream.rollout_id))
        if text is None:
            return None
        segments = parse_rollout(text).segments
        stream.latest = max((s.updated_at for s in segments if s.updated_at), default=None)
        for segment in reversed(segments):
            if segment.source.get("stream") == stream.stream:
                through = segment.source.get("through")
                return through if isinstance(through, dict) else None
        return None

    async def _record(self, stream: _Stream, plan: _Plan) -> IngestedSource:
        stone = tombstones.find(self.forgotten, stream.rollout_id)
        if stone is not None:
            return _skipped(
                stream.path,
                f"conversation {stream.rollout_id} was forgotten"
                + (f" ({stone.forgotten_at})" if stone.forgotten_at else "")
                + f"; `sandmem memory forget --undo {stream.rollout_id}` lets it be ingested again",
                stream,
            )
        meta = plan.meta
        if self.cwd is not None and not in_directory(meta.cwd, self.cwd):
            where = self.recorder.redactor.redact_name(meta.cwd) if meta.cwd else "not recorded"
            why = f"{OTHER_PROJECT}: its working directory ({where}) is not in {self.cwd}"
            return _skipped(stream.path, why, stream)
        mtime = await asyncio.to_thread(lambda: stream.path.stat().st_mtime)
        fallback = datetime.fromtimestamp(mtime, UTC).isoformat(timespec="milliseconds")
        fallback = fallback.replace("+00:00", "Z")
        recorded = items = 0
        kept = [(d, t) for d, t in zip(plan.drafts, plan.throughs, strict=True) if not d.empty]
        for index, (draft, through) in enumerate(kept):
            redact = self.recorder.redactor.redact_name  # ids and names may glue a secret
            source: dict[str, Any] = {
                "format": stream.format,
                "session_id": _capped(
                    redact(meta.session_id or stream.session_id), MAX_SOURCE_FIELD_CHARS
                ),
                "stream": stream.stream,
                "path": _capped(redact(str(stream.path)), MAX_SOURCE_FIELD_CHARS),
            }
            caps = {"cwd": MAX_SOURCE_FIELD_CHARS, "started_at": 64, "title": self.max_title_chars}
            for key, cap in caps.items():
                if getattr(meta, key):
                    source[key] = _capped(str(getattr(meta, key)), cap)
            source["through"] = through
            if index == len(kept) - 1 and meta.dropped:
                source["dropped"] = dict(sorted(meta.dropped.items()))
            segment = segment_of(
                draft, stream.rollout_id, stream.conversation_key, source, fallback
            )
            # never older than the conversation's newest segment (a sub-agent's file read
            # after its parent's): the conversation's updated_at stays its last event's time
            if stream.latest is not None and segment["updated_at"] < stream.latest:
                segment["updated_at"] = stream.latest
            stream.latest = segment["updated_at"]
            await self.recorder.record(segment)
            recorded += 1
            items += len(draft.input) + len(draft.generated)
        return IngestedSource(
            path=str(stream.path),
            format=stream.format,
            session_id=self.recorder.redactor.redact_name(meta.session_id or stream.session_id),
            rollout_id=stream.rollout_id,
            status="recorded" if recorded else "unchanged",
            segments=recorded,
            items=items,
            dropped=dict(sorted(meta.dropped.items())),
            pending_bytes=plan.pending_bytes,
            more=plan.more,
        )


# ---------------------------------------------------------------- helpers


def _parser(fmt: str) -> Callable[[Iterable[Line], SourceMeta], Iterator[Event]]:
    if fmt == "codex":
        return codex_events
    if fmt == "claude-code":
        return claude_events

    def lines_as_items(lines: Iterable[Line], meta: SourceMeta) -> Iterator[Event]:
        ends: dict[int, int] = {}

        def elements() -> Iterator[Element]:
            for line in lines:
                if line.data is not None:
                    ends[line.pos] = line.end
                    yield line.pos, None, line.data

        for event in item_events(elements(), meta):
            event.end = ends.get(event.pos)
            yield event

    return lines_as_items


def _take(events: Iterable[Event], start: int, budget: int) -> tuple[list[Event], bool]:
    """The events at or after ``start``, up to about ``budget`` bytes of items (never
    splitting one source position); and whether some were left for the next ingest."""
    kept: list[Event] = []
    size = 0
    for event in events:
        if event.pos < start:
            continue
        if size > budget and kept and event.pos != kept[-1].pos:
            return kept, True
        kept.append(event)
        if event.item is not None:
            size += len(json.dumps(event.item, ensure_ascii=False, default=str))
    return kept, False


def _prefix_digests(items: list[Any]) -> dict[int, str]:
    """For each n, the SHA-256 of the first n items (canonical JSON, one a line)."""
    digest = hashlib.sha256()
    found = {0: digest.hexdigest()}
    for index, item in enumerate(items, start=1):
        digest.update(json.dumps(item, sort_keys=True, default=str).encode("utf-8", "replace"))
        digest.update(b"\n")
        found[index] = digest.hexdigest()
    return found


def _identity(fmt: str, path: Path, head: list[dict[str, Any]]) -> tuple[str, str]:
    """The source session id of a JSONL file and a suffix naming a sub-agent's own file: from
    the Codex session meta or Claude Code's ``sessionId``, else the file name."""
    if fmt == "codex":
        for data in head:
            payload = data.get("payload") if data.get("type") == "session_meta" else None
            if isinstance(payload, dict) and isinstance(payload.get("id"), str):
                parent = subagent_parent(payload)
                if parent is not None:  # a sub-agent joins its parent's conversation
                    return parent, f":agent-{payload['id']}"
                return payload["id"], ""
        if head and isinstance(head[0].get("id"), str) and "type" not in head[0]:
            return head[0]["id"], ""
        stem = path.stem
        return (stem[-36:] if len(stem) > 36 and stem[-37] == "-" else stem), ""
    if fmt == "claude-code":
        for data in head:
            if isinstance(data.get("sessionId"), str):
                agent = data.get("agentId")
                if data.get("isSidechain") and isinstance(agent, str) and agent:
                    return data["sessionId"], f":agent-{agent}"
                return data["sessionId"], ""
        return path.stem, ""
    return path.stem, ""


#: how a session of another project (``cwd`` filter) is reported as skipped
OTHER_PROJECT = "another project"


def in_directory(path: str | None, directory: str) -> bool:
    """Whether ``path`` (a transcript's working directory, as recorded) is ``directory`` or
    inside it; ``directory`` is an absolute normalised path (compared also with its real
    path, so a symlinked home matches)."""
    if not path or not os.path.isabs(path):
        return False
    given = os.path.normpath(path)
    for root in {directory, os.path.realpath(directory)}:
        if given == root or given.startswith(root.rstrip("/") + "/"):
            return True
    return False


def _not_a_file(path: Path) -> str:
    """Why ``path`` is not a file ingest can read, in a few words."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file" + (" (a broken link)" if path.is_symlink() else "")
    except OSError as exc:
        return f"cannot read it: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file (a device, FIFO or socket)"


def _skipped(path: Path, why: str, stream: _Stream | None = None) -> IngestedSource:
    return IngestedSource(
        path=str(path),
        format=stream.format if stream else None,
        session_id=stream.session_id if stream else None,
        rollout_id=stream.rollout_id if stream else None,
        status="skipped",
        error=why,
    )


def _failed(path: Path, why: str, stream: _Stream) -> IngestedSource:
    result = _skipped(path, why, stream)
    result.status = "failed"
    return result


__all__ = ["MAX_INGEST_BYTES", "MAX_TITLE_CHARS", "Ingestor", "decode_line", "expand"]
