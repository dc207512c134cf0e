"""Figure 11: ingesting a large Codex CLI transcript with ``sandmem memory ingest``.

A Codex rollout of ``turns`` turns is written, each turn a user message, a shell call, a
command output of about ``output_bytes`` bytes and an answer (about 200 MB by default, the size
issue 27 names). Timed: the first ingest (parse, bound each output to 32 KiB, redact, append;
repeated while the 32 MiB budget of one ingest leaves more),
a re-ingest of the unchanged file (records nothing), and an ingest after one more turn was
appended (records one segment). Then the extractive engine generates memory from the
conversation once. Sizes of the source and of the rollout file are measured on disk.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_common import Figure, secs, table

from sandmem.memory import generate_sync, ingest_sync

SESSION = "bench-0000-0000-0000-000000000000"


def _turn(n: int, output: str) -> list[dict[str, Any]]:
    ts = f"2026-11-20T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": f"build target {n}"}],
        },
        {
            "type": "function_call",
            "name": "shell",
            "call_id": f"c{n}",
            "arguments": json.dumps({"command": ["bash", "-lc", f"make build-{n}"]}),
        },
        {
            "type": "function_call_output",
            "call_id": f"c{n}",
            "output": json.dumps({"output": output, "metadata": {"exit_code": n % 2}}),
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": f"target {n} built"}],
        },
    ]
    return [{"timestamp": ts, "type": "response_item", "payload": item} for item in items]


def write_rollout(path: Path, turns: int, output_bytes: int) -> None:
    line = "compiling module and linking objects, step ok\n"
    output = line * max(1, output_bytes // len(line))
    with path.open("w", encoding="utf-8") as out:
        meta = {
            "timestamp": "2026-11-20T00:00:00Z",
            "type": "session_meta",
            "payload": {"id": SESSION, "cwd": "/srv/big"},
        }
        out.write(json.dumps(meta) + "\n")
        for n in range(turns):
            out.write("".join(json.dumps(row) + "\n" for row in _turn(n, output)))


def _timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def run(turns: int = 1000, output_bytes: int = 200_000) -> Figure:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = root / f"rollout-2026-11-20T00-00-00-{SESSION}.jsonl"
        workspace = root / "ws"
        workspace.mkdir()
        write_rollout(source, turns, output_bytes)
        calls: list[tuple[float, int]] = []  # until no source has more left
        while True:
            took, report = _timed(lambda: ingest_sync(workspace, [source]))
            calls.append((took, report.recorded_segments))
            if not any(s.more for s in report.sources):
                break
        again_s, again = _timed(lambda: ingest_sync(workspace, [source]))
        with source.open("a", encoding="utf-8") as out:
            out.write("".join(json.dumps(r) + "\n" for r in _turn(turns, "one more\n")))
        append_s, appended = _timed(lambda: ingest_sync(workspace, [source]))
        rollout = workspace / "sessions" / f"codex-{SESSION}.jsonl"
        rollout_mb = rollout.stat().st_size / 1e6
        gen_s, generated = _timed(lambda: generate_sync(workspace, engine="extractive"))
        source_mb = source.stat().st_size / 1e6
    data = {
        "source_mb": source_mb,
        "rollout_mb": rollout_mb,
        "calls": len(calls),
        "first_s": sum(t for t, _ in calls),
        "first_segments": sum(n for _, n in calls),
        "again_s": again_s,
        "again_segments": again.recorded_segments,
        "append_s": append_s,
        "append_segments": appended.recorded_segments,
        "generate_s": gen_s,
        "generated": generated.complete,
    }
    rows = [
        *(
            [f"first ingest, call {i} of {len(calls)}", secs(t), n]
            for i, (t, n) in enumerate(calls, start=1)
        ),
        ["re-ingest, file unchanged", secs(again_s), again.recorded_segments],
        ["ingest after one appended turn", secs(append_s), appended.recorded_segments],
        ["extractive generation of the conversation", secs(gen_s), "-"],
    ]
    body = (
        f"A Codex rollout of {turns:,} turns ({source_mb:,.1f} MB; each command output about "
        f"{output_bytes:,} bytes) ingested into a fresh workspace; the rollout file it makes "
        f"is {rollout_mb:,.1f} MB.\n\n" + table(["step", "time", "segments recorded"], rows)
    )
    meaning = (
        "An ingest reads the whole source once in a stream (lines are never all held), so its "
        "time grows with the source's size even when nothing is new; what it records is "
        "bounded by the 32 KiB cap per string and the 32 MiB cap per ingest (the next call goes "
        "on where one stopped). A re-ingest "
        "records nothing and an appended turn records one segment: the bookkeeping is the "
        "rollout file's last segment."
    )
    return Figure("ingest", 11, "Ingesting a large Codex transcript", body, meaning, None, data)


if __name__ == "__main__":
    print(run().markdown())
