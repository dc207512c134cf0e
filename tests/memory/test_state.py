"""memory.state: the retry rules shared by the manager and maintenance (pure)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta

import pytest

from sandmem._errors import (
    MaxTurnsExceeded,
    MemoryGenerationError,
    ModelBehaviorError,
    ModelRequestError,
    SandboxError,
)
from sandmem.memory._json import loads_bounded
from sandmem.memory.state import (
    RolloutState,
    backoff_delay,
    classify,
    is_due,
    parse_state,
    reconcile,
    record_failure,
    state_text,
    status_of,
)

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def fail(entry: RolloutState, kind: str, *, seed: int = 0) -> RolloutState:
    return record_failure(
        entry,
        kind,  # type: ignore[arg-type]
        "boom",
        NOW,
        max_attempts=3,
        backoff_s=30,
        backoff_max_s=600,
        rng=random.Random(seed),
    )


def test_reconcile_trusts_the_files() -> None:
    fresh = reconcile(None, 2, "t2", up_to_date=False)
    assert (fresh.status, fresh.attempts, fresh.segments) == ("pending", 0, 2)
    # a kill during phase one left "pending" although the raw memory was written: done
    stale = RolloutState(status="pending", attempts=1, segments=2, updated_at="t2")
    assert reconcile(stale, 2, "t2", up_to_date=True).status == "done"
    # a new segment restarts a failed rollout
    failed = RolloutState(status="failed", attempts=3, segments=2, updated_at="t2")
    again = reconcile(failed, 3, "t3", up_to_date=False)
    assert (again.status, again.attempts) == ("pending", 0)
    assert reconcile(failed, 2, "t2", up_to_date=False) == failed
    # "done" whose raw memory is gone is extracted again
    done = RolloutState(status="done", segments=2, updated_at="t2")
    assert reconcile(done, 2, "t2", up_to_date=False).status == "pending"


def test_environment_failures_use_no_attempt_and_back_off() -> None:
    entry = RolloutState(segments=1, updated_at="t")
    delays = []
    for _ in range(8):
        entry = fail(entry, "environment")
        assert entry.status == "pending" and entry.attempts == 0
        assert entry.failure_kind == "environment" and entry.next_retry_at is not None
        retry = datetime.fromisoformat(entry.next_retry_at.replace("Z", "+00:00"))
        delays.append((retry - NOW).total_seconds())
    ceilings = [min(600, 30 * 2**n) for n in range(8)]
    assert all(c / 2 - 0.01 <= d <= c + 0.01 for d, c in zip(delays, ceilings, strict=True))
    assert max(delays) <= 600.01  # capped
    assert delays[3] > delays[0]  # exponential
    assert not is_due(entry, NOW)
    assert is_due(entry, NOW, wait_backoff=False)
    assert is_due(entry, NOW + timedelta(seconds=601))


def test_backoff_is_jittered() -> None:
    values = {round(backoff_delay(3, 30, 600, random.Random(seed)), 3) for seed in range(5)}
    assert len(values) == 5 and all(60 <= v <= 120 for v in values)


def test_rollout_failures_count_toward_max_attempts() -> None:
    entry = fail(RolloutState(), "environment")
    entry = fail(entry, "rollout")
    assert (entry.status, entry.attempts, entry.next_retry_at) == ("pending", 1, None)
    entry = fail(fail(entry, "rollout"), "rollout")
    assert (entry.status, entry.attempts) == ("failed", 3)
    assert not is_due(entry, NOW) and is_due(entry, NOW, retry_failed=True)


def test_configuration_failures_use_no_attempt_and_set_no_retry_time() -> None:
    entry = RolloutState()
    for _ in range(5):
        entry = fail(entry, "configuration")
    assert (entry.status, entry.attempts, entry.next_retry_at) == ("pending", 0, None)
    assert entry.failure_kind == "configuration" and is_due(entry, NOW)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ModelRequestError("connection refused", retryable=True), "environment"),
        (ModelRequestError("HTTP 429", status_code=429, retryable=True), "environment"),
        (ModelRequestError("HTTP 503", status_code=503, retryable=True), "environment"),
        (ModelRequestError("context_length_exceeded", status_code=400), "rollout"),
        (ModelRequestError("HTTP 401 Incorrect API key", status_code=401), "configuration"),
        (ModelRequestError("HTTP 403 forbidden", status_code=403), "configuration"),
        (ModelRequestError("HTTP 404 not found", status_code=404), "configuration"),
        (
            ModelRequestError("HTTP 400: model 'qwen9' not found, try pulling it", status_code=400),
            "configuration",
        ),
        (
            ModelRequestError("HTTP 400: The model `gpt-x` does not exist", status_code=400),
            "configuration",
        ),
        (
            ModelRequestError("HTTP 400: Invalid model name passed", status_code=400),
            "configuration",
        ),
        (ModelRequestError("HTTP 400: messages must not be empty", status_code=400), "rollout"),
        (ConnectionRefusedError("refused"), "environment"),
        (TimeoutError("timed out"), "environment"),
        (OSError("Name or service not known"), "environment"),
        (ModelBehaviorError("not valid JSON"), "rollout"),
        (MemoryGenerationError("empty raw_memory"), "rollout"),
        (MaxTurnsExceeded("turn limit"), "rollout"),
        (SandboxError("read failed"), "rollout"),
        (RuntimeError("refused to summarise"), "rollout"),
    ],
)
def test_classify(exc: BaseException, kind: str) -> None:
    assert classify(exc) == kind


def test_classify_follows_the_cause() -> None:
    try:
        try:
            raise ModelRequestError("HTTP 502", status_code=502, retryable=True)
        except ModelRequestError as inner:
            raise MemoryGenerationError("phase one request failed") from inner
    except MemoryGenerationError as outer:
        assert classify(outer) == "environment"


def test_bad_state_entries_are_dropped_alone() -> None:
    text = json.dumps(
        {
            "version": 1,
            "rollouts": {
                "good": {"status": "failed", "attempts": 3, "segments": 1, "updated_at": "t"},
                "as-string": "pending",
                "as-number": 5,
                "as-list": [1, 2],
                "many": {"attempts": "many"},
                "bad-status": {"status": "exploded"},
            },
            "phase_two": "broken",
        }
    )
    state, problems = parse_state(text, "memories/generation_state.json")
    assert list(state.rollouts) == ["good"] and state.rollouts["good"].status == "failed"
    dropped = [p for p in problems if "entry" in p.reason]
    assert len(dropped) == 5 + 1  # five rollout entries and the phase_two entry
    assert all(p.path == "memories/generation_state.json" for p in problems)


@pytest.mark.parametrize(
    "text", ["{not json", "[]", '"x"', '{"rollouts": 5}', "[" * 200_000 + "]" * 200_000]
)
def test_unreadable_state_is_rebuilt(text: str) -> None:
    state, problems = parse_state(text, "s.json")
    assert state.rollouts == {} and len(problems) == 1 and "rebuilt" in problems[0].reason


def test_json_depth_limit() -> None:
    assert loads_bounded("[" * 50 + "]" * 50) is not None
    with pytest.raises(ValueError, match="deeper"):
        loads_bounded("[" * 300 + "]" * 300)
    with pytest.raises(ValueError, match="deeper"):
        loads_bounded("[" * 200_000 + "]" * 200_000)
    # many brackets inside strings are not depth
    assert loads_bounded(json.dumps({"code": "[" * 1000})) == {"code": "[" * 1000}


def test_the_state_file_is_one_entry_a_line_and_parses_back() -> None:
    state, _ = parse_state(
        json.dumps(
            {
                "version": 1,
                "rollouts": {
                    "b": {"status": "failed", "attempts": 3, "last_error": 'x "quoted"'},
                    "a": {"status": "done", "segments": 2, "updated_at": "t"},
                },
                "phase_two": {"status": "done", "selection": '{"added": ["a"]}'},
            }
        ),
        "state.json",
    )
    text = state_text(state.to_json())
    assert json.loads(text) == state.to_json()
    rollouts = text.split('"rollouts": {\n', 1)[1].split("\n  }", 1)[0].splitlines()
    assert [line.split(": ", 1)[0].strip() for line in rollouts] == ['"a"', '"b"']
    assert json.loads(rollouts[0].split(": ", 1)[1].rstrip(",")) == state.to_json()["rollouts"]["a"]
    assert json.loads(state_text({"version": 1, "rollouts": {}})) == {"version": 1, "rollouts": {}}


@pytest.mark.parametrize("up_to_date", [True, False])
@pytest.mark.parametrize("same", [True, False])
@pytest.mark.parametrize("status", [None, "pending", "done", "failed", "skipped"])
def test_status_of_is_what_reconcile_gives(
    status: str | None, same: bool, up_to_date: bool
) -> None:
    entry = None if status is None else RolloutState(status=status, segments=2, updated_at="t")
    reconciled = reconcile(entry, 2 if same else 3, "t", up_to_date)
    assert status_of(status, same, up_to_date) == reconciled.status  # type: ignore[arg-type]
