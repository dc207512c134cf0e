"""An OpenAI Agents SDK database given to ``ingest`` is read through the descriptor that was
checked (``memory/ingestion/_sqlite.py``): a FIFO, socket or directory at its name is refused
without a hang, rows still in the write-ahead log of a running application are read, and no
descriptor or connection is left open."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
from pathlib import Path

import pytest
from ingest_fixtures import agents_db, agents_items_one, write_agents_db

from sandmem.memory import ingest_sync


def _open_fds_to(path: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_rows_in_the_write_ahead_log_of_a_running_app_are_read(tmp_path: Path) -> None:
    """The Agents SDK's SQLiteSession keeps its database in WAL mode: rows an application
    wrote and has not checkpointed live in ``<db>-wal`` until it closes."""
    db = tmp_path / "agents.sqlite"
    conn = agents_db(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    items, expected = agents_items_one()
    conn.execute("INSERT INTO agent_sessions (session_id) VALUES (?)", (expected.session_id,))
    for item in items:
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            (expected.session_id, json.dumps(item)),
        )
    conn.commit()  # still open: the rows sit in the WAL
    assert (tmp_path / "agents.sqlite-wal").stat().st_size > 0
    workspace = tmp_path / "ws"
    workspace.mkdir()
    report = ingest_sync(workspace, [db])
    conn.close()
    [source] = report.sources
    assert source.status == "recorded" and source.rollout_id is not None
    text = (workspace / "sessions" / f"{source.rollout_id}.jsonl").read_text()
    first_user = next(i for i in items if i.get("role") == "user")
    content = first_user["content"]
    said = content if isinstance(content, str) else content[0]["text"]
    assert said[:40] in text
    assert _open_fds_to(db) == []


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))


def _directory(path: Path) -> None:
    path.mkdir()
    (path / "x").write_text("a directory where a database belongs")


@pytest.mark.parametrize("plant", [_fifo, _socket, _directory])
def test_a_special_file_at_a_database_name_is_refused_without_a_hang(
    tmp_path: Path, plant: object
) -> None:
    db = tmp_path / "agents.sqlite"
    plant(db)  # type: ignore[operator]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done: list[object] = []

    def run() -> None:
        try:
            done.append(ingest_sync(workspace, [db]))
        except Exception as exc:  # the CLI prints it as one line
            done.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "ingest hung on a special file"
    [result] = done
    if not isinstance(result, Exception):
        assert [s.status for s in result.sources] != ["recorded"]  # type: ignore[attr-defined]
    assert list(workspace.rglob("*.jsonl")) == []  # no conversation recorded


def test_a_database_reached_through_a_link_the_user_names_is_read(tmp_path: Path) -> None:
    real = tmp_path / "store" / "agents.sqlite"
    real.parent.mkdir()
    write_agents_db(real)
    link = tmp_path / "agents.sqlite"
    link.symlink_to(real)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    report = ingest_sync(workspace, [link])
    assert [s.status for s in report.sources].count("recorded") == 2
    assert ingest_sync(workspace, [link]).recorded_segments == 0  # incremental, as by name
    assert _open_fds_to(real) == []


def test_a_database_that_is_not_one_is_reported(tmp_path: Path) -> None:
    db = tmp_path / "agents.sqlite"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)  # the magic, then nothing
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        report = ingest_sync(workspace, [db])
    except sqlite3.Error as exc:  # pragma: no cover - the defect this test finds
        pytest.fail(f"a traceback for a bad database: {exc!r}")
    except Exception:
        return  # one line on the CLI
    assert [s.status for s in report.sources] != ["recorded"]
