"""Phase one: one rollout file in → a rollout summary and a raw memory out.

``run`` is a flush's phase one: it extracts the due rollouts with bounded concurrency and
records each outcome (``_record``). The pure core (``render_input``, ``validate_artifacts``) is
separate from the model call and from the file writes, so each can be tested alone. Phase one
gives the model no tools: it reads an untrusted transcript and must not be able to act on the
workspace.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from sandmem import tracing
from sandmem._errors import MemoryGenerationError, ModelBehaviorError, ModelRequestError
from sandmem._items import user_message
from sandmem._prompts import escape_fence, load_prompt, render_prompt
from sandmem._settings import ModelSettings, with_max_tokens
from sandmem._usage import Usage
from sandmem.memory import _files
from sandmem.memory import state as gen_state
from sandmem.memory._render import (
    parse_rollout,
    render_rollout,
    rollout_terminal_summary,
)
from sandmem.memory._secret_forms import SecretForms, case_blind, clean_name
from sandmem.memory._text import safe_text
from sandmem.memory._types import PhaseOneArtifacts
from sandmem.memory.config import EXTRACTIVE, PHASE_ONE_MAX_TOKENS, MemoryGenerateConfig
from sandmem.memory.generation import _trace
from sandmem.memory.generation._gate import AdaptiveGate, FixedGate, Gate
from sandmem.memory.generation._metering import MeteredModel
from sandmem.memory.generation._record import FlushRecord, usage_fields
from sandmem.memory.generation._scan import Scan, StatPair, stat_pair
from sandmem.memory.layout import (
    MemoryPaths,
    RolloutFingerprint,
    bound_rollout,
    fingerprint,
    parse_header,
    read_text,
    render_with_header,
)
from sandmem.memory.state import FailureKind, GenerationState
from sandmem.models._base import Model, ModelProvider, ModelRequest, OutputSchema
from sandmem.redaction import Redactor
from sandmem.sandboxes._session import SandboxSession

ROLLOUT_MAX_TOKENS = 150_000
SLUG_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,79}$")


logger = logging.getLogger("sandmem.memory")


def extra_guidance_block(extra_prompt: str | None) -> str:
    """The developer's extra guidance as a clearly headed block ("" when none)."""
    if not extra_prompt or not extra_prompt.strip():
        return ""
    return f"\n\n## Developer-specific extra guidance\n\n{extra_prompt.strip()}\n"


def instructions(rollout_id: str, extra_prompt: str | None) -> str:
    template = load_prompt("sandmem.memory", "phase_one")
    return render_prompt(template, rollout_ref=rollout_id) + extra_guidance_block(extra_prompt)


#: JSON without spaces after separators: the metadata line costs fewer tokens
_COMPACT = (",", ":")


def render_input(rollout_id: str, rollout_text: str, omitted_bytes: int = 0) -> str:
    """The user message of phase one: terminal metadata, then the compact transcript (capped
    at 150,000 tokens, head and tail kept) fenced as untrusted data: no tag inside it can end
    the fence (``escape_fence``)."""
    parsed = parse_rollout(rollout_text)
    meta = rollout_terminal_summary(parsed)
    transcript = render_rollout(parsed, max_tokens=ROLLOUT_MAX_TOKENS)
    note = (
        f"Note: the rollout file is very large; {omitted_bytes} bytes of whole segments from "
        "its middle were omitted before rendering.\n"
        if omitted_bytes
        else ""
    )
    meta_json = json.dumps(meta, sort_keys=True, separators=_COMPACT, default=str)
    return (
        f"Rollout id: {rollout_id}\n"
        f"Terminal metadata (JSON): {meta_json}\n"
        f"{note}\n"
        "<transcript>\n"
        f"{escape_fence(transcript, 'transcript')}\n"
        "</transcript>\n"
    )


def normalize_slug(slug: str) -> str:
    value = slug.strip()
    if value.endswith(".md"):
        value = value[:-3]
    return value


def validate_artifacts(artifacts: PhaseOneArtifacts, rollout_id: str) -> PhaseOneArtifacts | None:
    """``None`` when all three fields are empty (nothing worth remembering); the artifacts
    with a normalised slug when all are set; ``MemoryGenerationError`` otherwise."""
    slug = normalize_slug(artifacts.rollout_slug)
    summary = artifacts.rollout_summary.strip()
    raw = artifacts.raw_memory.strip()
    filled = [bool(slug), bool(summary), bool(raw)]
    if not any(filled):
        return None
    if not all(filled):
        names = ("rollout_slug", "rollout_summary", "raw_memory")
        empty = [n for n, f in zip(names, filled, strict=True) if not f]
        raise MemoryGenerationError(
            f"phase one returned empty {', '.join(empty)} for rollout {rollout_id}: either all "
            "three fields are set or none",
            rollout_id=rollout_id,
        )
    if not SLUG_PATTERN.fullmatch(slug):
        raise MemoryGenerationError(
            f"phase one returned an invalid slug {slug!r} for rollout {rollout_id}; a slug "
            "matches ^[a-z0-9][a-z0-9_-]{0,79}$",
            rollout_id=rollout_id,
        )
    return PhaseOneArtifacts(rollout_slug=slug, rollout_summary=summary, raw_memory=raw)


#: the copy rule: a model's summary or raw memory of at least ``COPY_MIN_WORDS`` words is
#: refused when ``COPY_SHARE`` or more of its runs of ``COPY_RUN`` words appear word for word
#: in the transcript it was given (a summary condenses; quoting an error line is fine)
COPY_RUN = 8
COPY_SHARE = 0.5
COPY_MIN_WORDS = 80
_WORD = re.compile(r"\w+")


def _runs(words: list[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + COPY_RUN]) for i in range(len(words) - COPY_RUN + 1)}


def copied_share(text: str, transcript: str) -> float:
    """The share of ``text``'s runs of ``COPY_RUN`` words (case-insensitive) that appear in
    ``transcript`` word for word (0.0 for a text shorter than ``COPY_MIN_WORDS`` words)."""
    words = _WORD.findall(text.lower())
    if len(words) < COPY_MIN_WORDS:
        return 0.0
    mine = [tuple(words[i : i + COPY_RUN]) for i in range(len(words) - COPY_RUN + 1)]
    source = _runs(_WORD.findall(transcript.lower()))
    return sum(run in source for run in mine) / len(mine)


def refuse_copies(artifacts: PhaseOneArtifacts, transcript: str, rollout_id: str) -> None:
    """Raise ``MemoryGenerationError`` when the summary or the raw memory is mostly a copy of
    the transcript (the copy rule above)."""
    for name, text in (
        ("rollout_summary", artifacts.rollout_summary),
        ("raw_memory", artifacts.raw_memory),
    ):
        share = copied_share(text, transcript)
        if share >= COPY_SHARE:
            raise MemoryGenerationError(
                f"phase one's {name} for rollout {rollout_id} is mostly a copy of the "
                f"transcript ({share:.0%} of its {COPY_RUN}-word runs appear in it word for "
                "word); a summary must condense what happened, so it was refused",
                rollout_id=rollout_id,
            )


def resolve_model(spec: str | Model, provider: ModelProvider) -> Model:
    return spec if isinstance(spec, Model) else provider.get_model(spec)


async def call_model(
    rollout_id: str,
    rollout_text: str,
    config: MemoryGenerateConfig,
    provider: ModelProvider,
    omitted_bytes: int = 0,
    usage: Usage | None = None,
    request_slot: Gate | None = None,
) -> PhaseOneArtifacts:
    """One structured-output model call, no tools. The request is added to ``usage`` even
    when it fails or its answer is unusable. ``request_slot`` runs the request only
    (rendering happens before a slot is taken); an adaptive gate may send it again after a
    429 (each request is counted)."""
    from sandmem.agent._schema import json_repair_message, parse_structured_output

    model = MeteredModel(
        tracing.instrument_model(resolve_model(config.phase_one_model, provider)), usage or Usage()
    )
    # rendering a long rollout is CPU work (tens of ms): keep it off the event loop so the
    # flush's other requests keep moving meanwhile
    rendered = await asyncio.to_thread(render_input, rollout_id, rollout_text, omitted_bytes)
    request = ModelRequest(
        instructions=instructions(rollout_id, config.extra_prompt),
        input=[user_message(rendered)],
        tools=[],
        output_schema=_artifacts_schema(),
        settings=with_max_tokens(
            config.phase_one_model_settings or ModelSettings(), PHASE_ONE_MAX_TOKENS
        ),
    )
    text = await _ask(model, request, rollout_id, request_slot)
    try:
        artifacts: PhaseOneArtifacts = parse_structured_output(PhaseOneArtifacts, text)
    except ModelBehaviorError as exc:
        # one repair request: the answer, then what was wrong with it (small models wrap JSON
        # in prose or cut it short; asked once, they usually answer it clean)
        repair = replace(
            request,
            input=[
                *request.input,
                {"type": "message", "role": "assistant", "content": text},
                user_message(json_repair_message(exc)),
            ],
        )
        text = await _ask(model, repair, rollout_id, request_slot)
        try:
            artifacts = parse_structured_output(PhaseOneArtifacts, text)
        except ModelBehaviorError as again:
            raise MemoryGenerationError(
                f"phase one output for rollout {rollout_id} is not valid, also after one "
                f"repair request: {again}",
                rollout_id=rollout_id,
            ) from again
    await asyncio.to_thread(refuse_copies, artifacts, rendered, rollout_id)
    return artifacts


async def _ask(
    model: Model, request: ModelRequest, rollout_id: str, request_slot: Gate | None
) -> str:
    """The text of the model's answer to ``request`` (in ``request_slot`` when given)."""
    try:
        if request_slot is None:
            response = await model.get_response(request)
        else:
            response = await request_slot.run(lambda: model.get_response(request))
    except ModelRequestError as exc:
        raise MemoryGenerationError(
            f"phase one request failed for rollout {rollout_id}: {exc}",
            rollout_id=rollout_id,
            retryable=True,
        ) from exc
    return _output_text(response.output)


@functools.cache
def _artifacts_schema() -> OutputSchema:
    """The phase-one output schema, built once (pydantic's schema generation costs about a
    millisecond of event-loop time per call)."""
    from sandmem.agent._schema import output_schema_for

    return output_schema_for(PhaseOneArtifacts)


def _output_text(output: list[dict[str, Any]]) -> str:
    from sandmem._items import message_text

    texts = [message_text(i) for i in output if i.get("role") == "assistant"]
    return texts[-1] if texts else ""


async def extract(
    rollout_id: str,
    rollout_text: str,
    config: MemoryGenerateConfig,
    provider: ModelProvider,
    omitted_bytes: int = 0,
    usage: Usage | None = None,
    request_slot: Gate | None = None,
) -> PhaseOneArtifacts | None:
    """Run phase one for one rollout with the configured engine; model requests are added
    to ``usage`` as they are made (each inside ``request_slot`` when given)."""
    if config.phase_one_model == EXTRACTIVE:
        return await _extractive(rollout_id, rollout_text)
    try:
        artifacts = await call_model(
            rollout_id, rollout_text, config, provider, omitted_bytes, usage, request_slot
        )
        return validate_artifacts(artifacts, rollout_id)
    except (MemoryGenerationError, ModelBehaviorError) as exc:
        # a server problem (the request failed) is retried at the next flush; an answer that
        # cannot be used is replaced by the extractive engine's, so memory never goes blank
        # because a small model copied the transcript or could not write JSON
        if not config.phase_one_fallback or isinstance(exc.__cause__, ModelRequestError):
            raise
        fallback = await _extractive(rollout_id, rollout_text)
        if fallback is None:
            raise
        logger.warning(
            "memory: phase one's answer for %s could not be used (%s); extracted by the "
            "extractive engine instead",
            rollout_id,
            exc,
        )
        note = FALLBACK_NOTE.format(reason=_one_line(str(exc)))
        return fallback.model_copy(
            update={"rollout_summary": f"{note}\n\n{fallback.rollout_summary}"}
        )


#: the first line of a rollout summary the extractive engine wrote in place of the model's
FALLBACK_NOTE = "(Extracted without a model: the model's answer could not be used: {reason}.)"


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


async def _extractive(rollout_id: str, rollout_text: str) -> PhaseOneArtifacts | None:
    from sandmem.memory.extractive import extract as extractive_extract

    artifacts = await asyncio.to_thread(extractive_extract, rollout_id, rollout_text)
    return None if artifacts is None else validate_artifacts(artifacts, rollout_id)


@dataclass(frozen=True)
class WrittenArtifacts:
    raw_memory_path: str
    summary_path: str


async def write_artifacts(
    session: SandboxSession,
    paths: MemoryPaths,
    rollout_id: str,
    fp: RolloutFingerprint,
    artifacts: PhaseOneArtifacts,
    redactor: Redactor,
    forms: SecretForms | None = None,
) -> WrittenArtifacts:
    """Write the rollout summary, then the raw memory (the raw memory last: it is what marks
    the rollout as up to date). A previous summary under another slug is removed. Secrets go
    in every form: ``forms`` (those found in the transcript) covers what the artifacts
    derived from them (a slug's lower-case words, an upper-cased quote, a cut)."""
    forms = forms or SecretForms()
    raw_path = paths.raw_memory_file(rollout_id)
    slug = clean_name(artifacts.rollout_slug, redactor, forms)[:80].rstrip("_-") or "rollout"
    summary_path = paths.summary_file(rollout_id, slug)
    summary_name = summary_path.removeprefix(f"{paths.memories_dir}/")
    previous = await read_text(session, raw_path)
    rollout_path = paths.rollout_file(rollout_id)
    summary_text = render_with_header(
        {
            "session_id": rollout_id,
            "updated_at": fp.updated_at,
            "rollout_path": rollout_path,
            "terminal_state": fp.terminal_state,
        },
        safe_text(forms.redact(redactor.redact(artifacts.rollout_summary))),
    )
    raw_text = render_with_header(
        {
            "rollout_id": rollout_id,
            "updated_at": fp.updated_at,
            "rollout_path": rollout_path,
            "rollout_summary_file": summary_name,
            "terminal_state": fp.terminal_state,
            "segments": str(fp.segments),
        },
        safe_text(forms.redact(redactor.redact(artifacts.raw_memory))),
    )
    await _files.write(session, summary_path, summary_text)
    await _files.write(session, raw_path, raw_text)
    if previous is not None:
        old = parse_header(previous)[0].get("rollout_summary_file")
        if old and old != summary_name and "/" in old and ".." not in old:
            old_path = f"{paths.memories_dir}/{old}"
            if await _files.exists(session, old_path):
                await _files.remove(session, old_path)
    return WrittenArtifacts(raw_path, summary_path)


# ---------------------------------------------------------------- a flush's phase one


class Slots:
    """Phase one's two limits: ``request`` runs the model requests, pinned at
    ``phase_one_concurrency`` or, by default, adapted to the server under
    ``phase_one_max_concurrency`` (``_gate``); ``prepare`` bounds the rollouts read and
    rendered at once (twice the most requests), so rendering overlaps the requests without
    holding every rollout."""

    def __init__(self, config: MemoryGenerateConfig) -> None:
        pinned = config.phase_one_concurrency
        self.request: Gate = (
            FixedGate(pinned)
            if pinned is not None
            else AdaptiveGate(config.phase_one_max_concurrency)
        )
        self.prepare = asyncio.Semaphore(2 * (pinned or config.phase_one_max_concurrency))


class _Driver:
    """One flush's phase one: its record, provider, limits and the scan's bytes."""

    def __init__(
        self,
        record: FlushRecord,
        provider: ModelProvider,
        state: GenerationState,
        found: Scan,
        slots: Slots,
    ) -> None:
        self.record = record
        self.provider = provider
        self.state = state
        self.found = found
        self.slots = slots

    async def read_rollout(self, rid: str) -> tuple[bytes, StatPair | None]:
        """The rollout's bytes (from the scan when it kept them) and the file's stat taken
        before they were read (so a later append shows as a change)."""
        if rid in self.found.data:
            return self.found.data.pop(rid), self.found.stats[rid][0]
        session, path = self.record.session, self.record.paths.rollout_file(rid)
        before = stat_pair((await _files.stat_many(session, [path]))[path])
        return await _files.read_bytes(session, path), before

    async def _extracted(
        self, rid: str, usage: Usage
    ) -> tuple[gen_state.RolloutStatus, RolloutFingerprint, StatPair | None]:
        """Read, extract and write one rollout: its status, fingerprint and file stat."""
        record = self.record
        data, file_stat = await self.read_rollout(rid)
        fp = fingerprint(data)
        data, omitted = bound_rollout(data)
        text = data.decode("utf-8", "replace")
        del data
        artifacts = await extract(
            rid, text, record.config, self.provider, omitted, usage, self.slots.request
        )
        if artifacts is None:
            record.report.skipped.append(rid)
            return "skipped", fp, file_stat
        # a transcript is recorded redacted, but one written before a pattern was configured,
        # or planted in sessions/, holds secrets the artifacts may derive text from
        forms = await asyncio.to_thread(
            SecretForms.in_rollout,
            record.redactor,
            text,
            case_blind(record.config.redact_patterns) if record.config.redact_patterns else None,
        )
        del text
        await write_artifacts(
            record.session, record.paths, rid, fp, artifacts, record.redactor, forms
        )
        record.report.processed.append(rid)
        return "done", fp, file_stat

    async def extract_one(self, rid: str) -> None:
        # reading and rendering (``slots.prepare``) run ahead of the model requests
        # (``slots.request``, phase_one_concurrency at once), so the next rollouts are ready
        # to send when a request slot frees up
        record, state, report = self.record, self.state, self.record.report
        span_attributes = {_trace.ROLLOUT: rid}
        async with self.slots.prepare, tracing.aspan(_trace.PHASE_ONE, span_attributes) as span:
            started = time.monotonic()
            error: str | None = None
            kind: FailureKind | None = None
            usage = Usage()
            try:
                status, fp, file_stat = await self._extracted(rid, usage)
                raw_path = record.paths.raw_memory_file(rid)
                found = await _files.stat_many(record.session, [raw_path])
                state.rollouts[rid] = gen_state.record_success(
                    state.rollouts[rid], status, fp.segments, fp.updated_at, datetime.now(UTC)
                ).model_copy(
                    update={"file_stat": file_stat, "raw_stat": stat_pair(found[raw_path])}
                )
            except asyncio.CancelledError:
                report.phase_one_usage.add(usage)
                record.unlogged.add(usage)
                raise
            except Exception as exc:
                # a model server may echo request content in its error messages
                error = record.redactor.redact(f"{type(exc).__name__}: {exc}")
                kind = gen_state.classify(exc)
                entry = record.failure(state.rollouts[rid], kind, error)
                state.rollouts[rid] = entry
                status = entry.status
                report.failed[rid] = error
                report.failure_kinds[rid] = kind
            _trace.phase_one_done(span, status, usage, error)
            report.phase_one_usage.add(usage)
            log: dict[str, Any] = {
                "phase": "one",
                "rollouts": [rid],
                "status": status,
                "error": error,
                "failure_kind": kind,
                "duration_s": round(time.monotonic() - started, 3),
                **usage_fields(usage),
            }
            await record.save(state, log, force=False)


async def run(
    record: FlushRecord,
    provider: ModelProvider,
    due: list[str],
    state: GenerationState,
    found: Scan,
    slots: Slots,
) -> None:
    """Extract the due rollouts within ``slots``. Rollouts waiting for their retry time after
    an environment failure are tried too once this flush shows the server answers (one of
    them is sent first as a probe when nothing else is due); while it does not, they wait, so
    an outage costs one request per flush rather than one per rollout."""
    driver = _Driver(record, provider, state, found, slots)
    report = record.report
    waiting = sorted(report.deferred, key=lambda r: (state.rollouts[r].next_retry_at or "", r))
    first = due or waiting[:1]
    rest = [r for r in waiting if r not in first]
    report.pending = list(first)
    await asyncio.gather(*(driver.extract_one(r) for r in first))
    answered = bool(report.processed or report.skipped) or any(
        kind == "rollout" for kind in report.failure_kinds.values()
    )
    if rest and answered:
        report.pending += rest
        await asyncio.gather(*(driver.extract_one(r) for r in rest))
    report.deferred = [r for r in report.deferred if r not in report.pending]
    found.data.clear()
