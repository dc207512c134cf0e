"""Transcripts of other agents, written in their own formats (learned from their public
source and descriptions; the contents are ours), for the ingest tests.

Each writer returns what a faithful ingest must keep: the user messages, the final answers,
the failed commands, the file paths, and the secrets planted in them (which must not).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPENAI_KEY = "sk-proj-Zq8Xv2Lm4Np6Rt0Yw3Bc5Df7Gh9Jk1Mn"
AWS_KEY = "AKIAQ3ZT7RW5YV2XK4PM"
GITHUB_TOKEN = "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngXyZ12345678"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
SECRETS = (OPENAI_KEY, AWS_KEY, GITHUB_TOKEN, JWT, "Hunter2-Sup3rS3cret")


@dataclass
class Expected:
    path: Path
    format: str
    session_id: str
    user_messages: list[str] = field(default_factory=list)
    final_answers: list[str] = field(default_factory=list)
    failed_commands: list[str] = field(default_factory=list)
    file_paths: list[str] = field(default_factory=list)
    #: texts of the source that are not the user speaking (a sub-agent's task, a compaction
    #: summary, a notification): never rendered as a user message
    not_user: list[str] = field(default_factory=list)


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---------------------------------------------------------------- Codex CLI


def _cx(ts: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": f"2026-11-20T{ts}Z", "type": kind, "payload": payload}


def _cx_msg(ts: str, role: str, text: str) -> dict[str, Any]:
    part = "input_text" if role == "user" else "output_text"
    return _cx(
        ts,
        "response_item",
        {"type": "message", "role": role, "content": [{"type": part, "text": text}]},
    )


def codex_session_one(root: Path) -> Expected:
    sid = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    task = "Fix the failing invoice total test in billing/invoice.py"
    fix = "Never use float for money in this repo; use decimal.Decimal."
    final1 = "Fixed: the invoice total now multiplies price by quantity; all 3 tests pass."
    final2 = "Switched billing/invoice.py to Decimal; tests still pass."
    patch = (
        "*** Begin Patch\n*** Update File: billing/invoice.py\n@@\n"
        "-    return sum(line.price for line in lines)\n"
        "+    return sum(line.price * line.qty for line in lines)\n*** End Patch\n"
    )
    rows = [
        _cx(
            "10:00:00.000",
            "session_meta",
            {
                "id": sid,
                "timestamp": "2026-11-20T10:00:00.000Z",
                "cwd": "/home/dev/shop",
                "originator": "codex_cli_rs",
                "cli_version": "0.58.0",
                "instructions": None,
                "source": "cli",
                "model_provider": "openai",
                "git": {"branch": "main", "commit_hash": "abc123"},
            },
        ),
        _cx_msg(
            "10:00:00.100",
            "user",
            "<environment_context>\n  <cwd>/home/dev/shop</cwd>\n</environment_context>",
        ),
        _cx(
            "10:00:01.000",
            "turn_context",
            {
                "cwd": "/home/dev/shop",
                "approval_policy": "on-request",
                "sandbox_policy": {"mode": "workspace-write"},
                "model": "gpt-5-codex",
                "effort": "medium",
                "summary": "auto",
            },
        ),
        _cx_msg("10:00:01.100", "user", task),
        _cx("10:00:01.101", "event_msg", {"type": "user_message", "message": task, "images": []}),
        _cx(
            "10:00:02.000",
            "response_item",
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "Run tests"}],
                "content": None,
                "encrypted_content": "gAAAAB" + "x" * 80,
            },
        ),
        _cx(
            "10:00:02.500",
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "call_id": "call_a1",
                "arguments": json.dumps(
                    {
                        "command": ["bash", "-lc", "pytest -q tests/test_invoice.py"],
                        "workdir": "/home/dev/shop",
                        "timeout_ms": 120000,
                    }
                ),
            },
        ),
        _cx(
            "10:00:04.000",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_a1",
                "output": json.dumps(
                    {
                        "output": "F..\nFAILED tests/test_invoice.py::test_total - "
                        "AssertionError: 30 != 10\n1 failed, 2 passed",
                        "metadata": {"exit_code": 1, "duration_seconds": 1.4},
                    }
                ),
            },
        ),
        _cx("10:00:04.100", "event_msg", {"type": "token_count", "info": None}),
        _cx(
            "10:00:05.000",
            "response_item",
            {
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": "call_a2",
                "name": "apply_patch",
                "input": patch,
            },
        ),
        _cx(
            "10:00:05.200",
            "response_item",
            {
                "type": "custom_tool_call_output",
                "call_id": "call_a2",
                "output": "Success. Updated the following files:\nM billing/invoice.py\n",
            },
        ),
        _cx(
            "10:00:06.000",
            "response_item",
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": "call_a3",
                "arguments": json.dumps(
                    {"cmd": f"STRIPE_TOKEN={OPENAI_KEY} pytest -q", "workdir": "/home/dev/shop"}
                ),
            },
        ),
        _cx(
            "10:00:08.000",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_a3",
                "output": "Exit code: 0\nWall time: 1.9 seconds\nOutput:\n"
                f"3 passed\naws {AWS_KEY}\n",
            },
        ),
        _cx_msg("10:00:09.000", "assistant", final1),
        _cx("10:00:09.001", "event_msg", {"type": "agent_message", "message": final1}),
        _cx("10:00:09.002", "event_msg", {"type": "task_complete", "last_agent_message": final1}),
        _cx_msg("10:05:00.000", "user", fix),
        _cx(
            "10:05:01.000",
            "response_item",
            {
                "type": "local_shell_call",
                "call_id": "call_a4",
                "status": "completed",
                "action": {
                    "type": "exec",
                    "command": ["rg", "-n", "float", "billing/"],
                    "working_directory": "/home/dev/shop",
                    "timeout_ms": 10000,
                },
            },
        ),
        _cx(
            "10:05:01.500",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_a4",
                "output": json.dumps(
                    {"output": "billing/invoice.py:3: price: float", "metadata": {"exit_code": 0}}
                ),
            },
        ),
        _cx("10:05:02.000", "compacted", {"message": "Summary of the work so far."}),
        _cx(
            "10:05:02.100",
            "response_item",
            {
                "type": "function_call",
                "name": "spawn_agent",
                "arguments": json.dumps({"message": SUBAGENT_TASK, "agent_type": "explorer"}),
                "call_id": "call_a5",
            },
        ),
        _cx(
            "10:05:02.200",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_a5",
                "output": json.dumps({"agent_id": SUBAGENT_ID, "nickname": "Kepler"}),
            },
        ),
        _cx(
            "10:05:02.300",
            "response_item",
            {
                "type": "agent_message",
                "author": "/root/kepler",
                "recipient": "/root",
                "content": [
                    {"type": "input_text", "text": "Money fields live in billing/models.py."},
                    {"type": "encrypted_content", "encrypted_content": "gAAAAB" + "y" * 40},
                ],
            },
        ),
        _cx(
            "10:05:02.400",
            "response_item",
            {
                "type": "function_call",
                "name": "memory_search",
                "namespace": "mcp__sandmem_memory",
                "arguments": json.dumps({"query": "money decimal"}),
                "call_id": "call_a6",
            },
        ),
        _cx(
            "10:05:02.500",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_a6",
                "output": [
                    {"type": "input_text", "text": "Wall time: 0.05 seconds\nOutput:"},
                    {"type": "input_text", "text": "memories/MEMORY.md:3 use Decimal for money"},
                ],
            },
        ),
        _cx_msg("10:05:03.000", "assistant", final2),
    ]
    path = _jsonl(root / "2026/11/20" / f"rollout-2026-11-20T10-00-00-{sid}.jsonl", rows)
    return Expected(
        path,
        "codex",
        sid,
        [task, fix],
        [final1, final2],
        ["pytest -q tests/test_invoice.py"],
        ["billing/invoice.py", "billing/models.py"],
    )


SUBAGENT_ID = "0199a1b2-5555-7e5f-8a9b-222222222222"
SUBAGENT_TASK = "Find where money fields are declared under billing/"


def codex_subagent(root: Path, parent: Expected) -> Expected:
    """A thread the first session spawned: a rollout file of its own whose session meta names
    its parent; its first user message is the parent's task for it, not the user's."""
    rows = [
        _cx(
            "10:05:02.150",
            "session_meta",
            {
                "id": SUBAGENT_ID,
                "timestamp": "2026-11-20T10:05:02.150Z",
                "cwd": "/home/dev/shop",
                "originator": "codex_cli_rs",
                "cli_version": "0.171.0",
                "source": {
                    "subagent": {
                        "thread_spawn": {
                            "parent_thread_id": parent.session_id,
                            "depth": 1,
                            "agent_nickname": "Kepler",
                            "agent_role": "explorer",
                        }
                    }
                },
                "agent_nickname": "Kepler",
                "agent_role": "explorer",
            },
        ),
        _cx_msg("10:05:02.160", "user", SUBAGENT_TASK),
        _cx(
            "10:05:02.170",
            "response_item",
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": "s1",
                "arguments": json.dumps({"cmd": "grep -rn Decimal billing/missing"}),
            },
        ),
        _cx(
            "10:05:02.180",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "s1",
                "output": "Chunk ID: 1a2b\nWall time: 0.01 seconds\nProcess exited with code 2\n"
                "Output:\ngrep: billing/missing: No such file or directory\n",
            },
        ),
        _cx_msg("10:05:02.190", "assistant", "Money fields live in billing/models.py."),
    ]
    name = f"rollout-2026-11-20T10-05-02-{SUBAGENT_ID}.jsonl"
    path = _jsonl(root / "2026/11/20" / name, rows)
    return Expected(
        path,
        "codex",
        parent.session_id,
        [],
        [],
        ["grep -rn Decimal billing/missing"],
        ["billing/models.py"],
        not_user=[SUBAGENT_TASK],
    )


def codex_session_two(root: Path) -> Expected:
    sid = "0199a1b2-0000-7e5f-8a9b-111111111111"
    task = "Deploy the docs site with make deploy-docs"
    retry = "Use the staging profile, not prod"
    final = "Deployed to staging after the prod profile (password=Hunter2-Sup3rS3cret) was refused."
    rows = [
        _cx(
            "11:00:00.000",
            "session_meta",
            {
                "id": sid,
                "timestamp": "2026-11-20T11:00:00Z",
                "cwd": "/srv/docs",
                "cli_version": "0.58.0",
            },
        ),
        _cx_msg("11:00:01.000", "user", task),
        _cx(
            "11:00:02.000",
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "call_id": "c1",
                "arguments": json.dumps(
                    {"command": ["bash", "-lc", "make deploy-docs PROFILE=prod"]}
                ),
            },
        ),
        _cx(
            "11:00:03.000",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": "Exit code: 2\nWall time: 0.3 seconds\nOutput:\n"
                "error: profile prod needs password=Hunter2-Sup3rS3cret approval\n",
            },
        ),
        _cx("11:00:03.500", "event_msg", {"type": "turn_aborted", "reason": "interrupted"}),
        _cx_msg("11:01:00.000", "user", retry),
        _cx("11:01:01.000", "event_msg", {"type": "error", "message": "stream disconnected"}),
        _cx(
            "11:01:05.000",
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "call_id": "c2",
                "arguments": json.dumps({"command": ["make", "deploy-docs", "PROFILE=staging"]}),
            },
        ),
        _cx(
            "11:01:09.000",
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": json.dumps(
                    {"output": "published docs/index.html", "metadata": {"exit_code": 0}}
                ),
            },
        ),
        _cx("11:01:10.000", "response_item", {"type": "ghost_snapshot", "ghost_commit": {}}),
        _cx("11:01:10.500", "event_msg", {"type": "brand_new_event_kind", "x": 1}),
        _cx_msg("11:01:11.000", "assistant", final),
    ]
    path = _jsonl(root / "2026/11/20" / f"rollout-2026-11-20T11-00-00-{sid}.jsonl", rows)
    return Expected(
        path,
        "codex",
        sid,
        [task, retry],
        [final],
        ["make deploy-docs PROFILE=prod"],
        ["docs/index.html"],
    )


def codex_session_early(root: Path) -> Expected:
    """An early Codex file: the session meta and the items bare, without the wrapper."""
    sid = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
    task = f"Why does the cron job fail? The token is {GITHUB_TOKEN}"
    final = "The cron job fails because scripts/sync.sh is not executable."
    rows = [
        {"id": sid, "timestamp": "2025-06-01T09:00:00.000Z", "instructions": None},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
        {
            "type": "function_call",
            "name": "shell",
            "call_id": "e1",
            "arguments": json.dumps({"command": ["bash", "-lc", "./scripts/sync.sh"]}),
        },
        {
            "type": "function_call_output",
            "call_id": "e1",
            "output": json.dumps(
                {
                    "output": "bash: ./scripts/sync.sh: Permission denied",
                    "metadata": {"exit_code": 126},
                }
            ),
        },
        {"record_type": "state"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": final}],
        },
    ]
    path = _jsonl(root / "2025/06/01" / f"rollout-2025-06-01T09-00-00-{sid}.jsonl", rows)
    return Expected(path, "codex", sid, [task], [final], ["./scripts/sync.sh"], ["scripts/sync.sh"])


def codex_session_recent(root: Path) -> Expected:
    """The shape Codex CLI 0.171 writes (checked by running it against a local fake server):
    ``world_state`` and ``token_usage_record`` records, ``item_completed`` events, a developer
    message, and command outputs headed by ``Chunk ID`` / ``Wall time`` / ``Process exited
    with code N`` / ``Original token count`` / ``Output:``."""
    sid = "01a233be-40bf-7eb3-97f9-d50bf7d84b93"
    task = "Why does total(2, 3) fail? Check calc/app.py"
    final = "total() in calc/app.py subtracts instead of adding; it needs a + b."
    command = "python3 -c 'import app; assert app.total(2, 3) == 5'"
    rows = [
        _cx(
            "22:33:56.163",
            "session_meta",
            {
                "session_id": sid,
                "id": sid,
                "timestamp": "2026-11-20T22:33:56.163Z",
                "cwd": "/work/calc",
                "originator": "codex_exec",
                "cli_version": "0.171.0",
            },
        ),
        _cx("22:33:56.200", "event_msg", {"type": "task_started", "turn_id": "t1"}),
        _cx(
            "22:33:56.210",
            "response_item",
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "(our own stand-in instructions)"}],
            },
        ),
        _cx_msg(
            "22:33:56.220",
            "user",
            "<environment_context>\n  <cwd>/work/calc</cwd>\n</environment_context>",
        ),
        _cx("22:33:56.230", "world_state", {"full": True, "state": {"agents_md": {}}}),
        _cx(
            "22:33:56.240",
            "turn_context",
            {"turn_id": "t1", "cwd": "/work/calc", "approval_policy": "never", "model": "gpt-x"},
        ),
        _cx_msg("22:33:56.250", "user", task),
        _cx(
            "22:33:56.260",
            "event_msg",
            {
                "type": "item_completed",
                "item": {"type": "UserMessage", "content": [{"type": "text", "text": task}]},
            },
        ),
        _cx(
            "22:33:56.300",
            "response_item",
            {
                "type": "function_call",
                "status": "completed",
                "id": "fc_1_0",
                "name": "exec_command",
                "arguments": json.dumps({"cmd": command}),
                "call_id": "call_1",
            },
        ),
        _cx("22:33:56.310", "token_usage_record", {"usage": {"input_tokens": 10}}),
        _cx(
            "22:33:56.700",
            "response_item",
            {
                "type": "function_call_output",
                "id": "fco_1",
                "call_id": "call_1",
                "output": "Chunk ID: 601f18\nWall time: 0.3233 seconds\n"
                "Process exited with code 1\n"
                "Original token count: 23\nOutput:\nTraceback (most recent call last):\n"
                "AssertionError\n",
            },
        ),
        _cx_msg("22:33:56.845", "assistant", final),
        _cx("22:33:56.900", "event_msg", {"type": "task_complete", "last_agent_message": final}),
    ]
    path = _jsonl(root / "2026/11/20" / f"rollout-2026-11-20T22-33-56-{sid}.jsonl", rows)
    return Expected(path, "codex", sid, [task], [final], [command], ["calc/app.py"])


def write_codex(root: Path) -> list[Expected]:
    one = codex_session_one(root)
    return [
        one,
        codex_session_two(root),
        codex_session_early(root),
        codex_session_recent(root),
        codex_subagent(root, one),
    ]


# ---------------------------------------------------------------- Claude Code


class _Claude:
    def __init__(self, session_id: str, cwd: str, version: str = "2.0.30") -> None:
        self.session_id, self.cwd, self.version = session_id, cwd, version
        self.rows: list[dict[str, Any]] = []
        self.n = 0
        self.parent: str | None = None

    def entry(self, kind: str, content: Any, *, side: bool = False, **extra: Any) -> str:
        self.n += 1
        uuid = f"{self.session_id[:8]}-{self.n:04d}-4000-8000-000000000000"
        row: dict[str, Any] = {
            "parentUuid": self.parent,
            "isSidechain": side,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": "main",
            "type": kind,
            "message": {"role": kind, "content": content},
            "uuid": uuid,
            "timestamp": f"2026-11-21T08:{self.n // 60:02d}:{self.n % 60:02d}.000Z",
        }
        if kind == "assistant":
            row["message"].update(
                {
                    "model": "claude-sonnet-4-5",
                    "id": f"msg_{self.n}",
                    "type": "message",
                    "stop_reason": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            )
            row["requestId"] = f"req_{self.n}"
        if kind == "attachment":
            del row["message"]
        row.update(extra)
        self.rows.append(row)
        self.parent = uuid
        return uuid


def claude_session_one(root: Path) -> Expected:
    sid = "7d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    task = "The signup form accepts empty emails; fix validation in web/forms.py"
    pref = "Please always run ruff before saying you are done."
    final = "Validation fixed in web/forms.py: empty emails are rejected; ruff and tests pass."
    c = _Claude(sid, "/home/ana/webapp")
    c.rows.append(
        {"type": "summary", "summary": f"Signup fix, token {GITHUB_TOKEN}", "leafUuid": "x-leaf"}
    )
    c.entry("user", task)
    c.entry(
        "assistant", [{"type": "thinking", "thinking": f"maybe the key {JWT}", "signature": "sig"}]
    )
    c.entry("assistant", [{"type": "text", "text": "Let me run the form tests first."}])
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_01",
                "name": "Bash",
                "input": {
                    "command": "pytest tests/test_forms.py -q",
                    "description": "Run form tests",
                },
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "is_error": True,
                "content": "Exit code 1\nFAILED tests/test_forms.py::test_empty_email",
            }
        ],
        toolUseResult={"stdout": "", "stderr": "FAILED", "interrupted": False},
    )
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_02",
                "name": "Task",
                "input": {
                    "description": "Find validators",
                    "prompt": "Find where email validators live",
                    "subagent_type": "Explore",
                },
            }
        ],
    )
    c.entry("user", f"Find where email validators live (key {AWS_KEY})", side=True)
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_s1",
                "name": "Grep",
                "input": {"pattern": "validate_email", "path": "web"},
            }
        ],
        side=True,
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_s1",
                "content": "web/validators.py:12:def validate_email(value):",
            }
        ],
        side=True,
    )
    c.entry(
        "assistant", [{"type": "text", "text": "Validators are in web/validators.py"}], side=True
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_02",
                "content": [{"type": "text", "text": "Validators are in web/validators.py"}],
            }
        ],
    )
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_03",
                "name": "Edit",
                "input": {
                    "file_path": "/home/ana/webapp/web/forms.py",
                    "old_string": "required=False",
                    "new_string": f"required=True  # {JWT}",
                },
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_03",
                "content": "The file /home/ana/webapp/web/forms.py has been updated.",
            }
        ],
    )
    c.rows.append(
        {
            "type": "file-history-snapshot",
            "messageId": "m1",
            "snapshot": {},
            "isSnapshotUpdate": False,
        }
    )
    c.entry("assistant", [{"type": "text", "text": "Fixed the required flag."}])
    c.entry("user", pref)
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_04",
                "name": "Bash",
                "input": {"command": "ruff check web && pytest -q"},
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_04",
                "is_error": False,
                "content": "All checks passed!\n12 passed",
            }
        ],
    )
    c.entry("assistant", [{"type": "text", "text": final}])
    path = _jsonl(root / "-home-ana-webapp" / f"{sid}.jsonl", c.rows)
    return Expected(
        path,
        "claude-code",
        sid,
        [task, pref],
        [final],
        ["pytest tests/test_forms.py -q"],
        ["web/forms.py", "web/validators.py"],
    )


def claude_session_two(root: Path) -> Expected:
    sid = "0a0b0c0d-1111-4222-8333-444455556666"
    task = f"Rotate the AWS key {AWS_KEY} in infra/terraform.tfvars"
    final = "I could not finish: the API returned an overloaded error."
    c = _Claude(sid, "/home/ana/infra")
    c.entry("user", "<command-name>/clear</command-name>")
    c.entry("user", "Caveat: the messages below were generated by local commands", isMeta=True)
    c.entry("user", task)
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_11",
                "name": "Read",
                "input": {"file_path": "/home/ana/infra/infra/terraform.tfvars"},
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_11",
                "content": f'aws_secret = "{AWS_KEY}"\npassword=Hunter2-Sup3rS3cret',
            }
        ],
    )
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_12",
                "name": "Bash",
                "input": {"command": "terraform plan -var-file=infra/terraform.tfvars"},
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_12",
                "is_error": True,
                "content": "[Request interrupted by user for tool use]",
            }
        ],
    )
    c.entry("user", [{"type": "text", "text": "[Request interrupted by user for tool use]"}])
    c.entry("user", "Just edit the file, do not run terraform.")
    c.entry("assistant", [{"type": "text", "text": final}], isApiErrorMessage=True)
    c.entry("assistant", [{"type": "text", "text": final}])
    c.rows.append(
        {
            "type": "system",
            "subtype": "compact_boundary",
            "content": "compacted",
            "sessionId": sid,
            "timestamp": "2026-11-21T09:00:00.000Z",
        }
    )
    path = _jsonl(root / "-home-ana-infra" / f"{sid}.jsonl", c.rows)
    return Expected(
        path,
        "claude-code",
        sid,
        [task, "Just edit the file, do not run terraform."],
        [final],
        [],
        ["infra/terraform.tfvars"],
    )


def claude_session_recent(root: Path) -> Expected:
    """The shape Claude Code 2.1.332 writes (checked by running it against a local fake of
    Anthropic's API): ``queue-operation``, ``attachment`` entries (MCP server instructions,
    deferred tools, a prompt typed while the agent was busy: ``queued_command``),
    ``api-request`` / ``api-request-blob`` copies of what was sent, ``tools-used``,
    ``last-prompt`` and ``cost-state``; one assistant entry per content block; a deferred MCP
    tool loaded with ``ToolSearch``; and a compaction summary (``isCompactSummary``)."""
    sid = "f1056c66-ca4c-4664-8acd-f766c7719885"
    task = "How should invoices be rounded? Check billing/round.py"
    typed = "Also keep the rounding in one helper, please."
    final = "Invoices are rounded half-up to cents in billing/round.py (one helper)."
    compact = "Summary: the user asked about invoice rounding earlier."
    c = _Claude(sid, "/srv/shop", version="2.1.332")
    c.rows.append({"type": "queue-operation", "operation": "enqueue", "content": task})
    c.rows.append({"type": "queue-operation", "operation": "dequeue"})
    c.entry("user", task, promptId="p1", promptSource="sdk", permissionMode="default")
    for attachment in (
        {
            "type": "mcp_instructions_delta",
            "addedNames": ["sandmem-memory"],
            "addedBlocks": [f"## sandmem-memory\nMemory notes (key {OPENAI_KEY})"],
        },
        {"type": "deferred_tools_delta", "addedNames": ["mcp__sandmem-memory__memory_search"]},
        {"type": "hook_additional_context", "content": ["ignore me"], "hookEvent": "Start"},
    ):
        c.entry("attachment", None, attachment=attachment)
    c.rows.append(
        {
            "type": "api-request-blob",
            "hash": "cb0a95",
            "message": {"role": "user", "content": [{"type": "text", "text": f"sys {JWT}"}]},
        }
    )
    c.rows.append({"type": "api-request", "id": "r1", "querySource": "sdk", "params": {}})
    c.entry("assistant", [{"type": "text", "text": "Let me look first."}], apiBlockIndex=0)
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_b",
                "name": "Bash",
                "input": {"command": "python -m billing.round --check", "description": "x"},
            }
        ],
        apiBlockIndex=1,
    )
    c.rows.append({"type": "tools-used", "tools": ["Bash"]})
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "content": "Exit code 2\nusage error: --check needs a file",
                "is_error": True,
                "tool_use_id": "toolu_b",
            }
        ],
        toolUseResult="Error: Exit code 2\nusage error: --check needs a file",
        sourceToolAssistantUUID="x",
    )
    c.entry(
        "attachment",
        None,
        attachment={
            "type": "queued_command",
            "prompt": typed,
            "commandMode": "prompt",
            "origin": {"kind": "human"},
        },
    )
    c.entry(
        "attachment",
        None,
        attachment={
            "type": "queued_command",
            "prompt": "<task-notification><status>done</status></task-notification>",
            "commandMode": "task-notification",
        },
    )
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_t",
                "name": "ToolSearch",
                "input": {"query": "select:mcp__sandmem-memory__memory_search"},
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_t",
                "content": [
                    {"type": "tool_reference", "tool_name": "mcp__sandmem-memory__memory_search"}
                ],
            }
        ],
    )
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_s",
                "name": "mcp__sandmem-memory__memory_search",
                "input": {"query": "invoice rounding"},
            }
        ],
    )
    c.entry(
        "user",
        [
            {
                "tool_use_id": "toolu_s",
                "type": "tool_result",
                "content": [{"type": "text", "text": "memories/MEMORY.md:4 round half-up"}],
            }
        ],
        mcpMeta={"_meta": {"io.modelcontextprotocol/serverInfo": {"name": "sandmem-memory"}}},
    )
    c.rows.append({"type": "system", "subtype": "compact_boundary", "content": "Compacted"})
    c.entry("user", compact, isCompactSummary=True, isVisibleInTranscriptOnly=True)
    c.entry(
        "assistant",
        [{"type": "text", "text": final}],
        attributionMcpServer="sandmem-memory",
        attributionMcpTool="memory_search",
    )
    c.rows.append({"type": "last-prompt", "lastPrompt": task, "leafUuid": "l1"})
    c.rows.append({"type": "cost-state", "totalCostUSD": 0.0005, "modelUsage": {}})
    path = _jsonl(root / "-srv-shop" / f"{sid}.jsonl", c.rows)
    return Expected(
        path,
        "claude-code",
        sid,
        [task, typed],
        [final],
        ["python -m billing.round --check"],
        ["billing/round.py"],
        not_user=[compact, "task-notification"],
    )


def claude_subagent_file(root: Path, parent: Expected) -> Expected:
    """A sub-agent's own file (``<session>/subagents/agent-<id>.jsonl``, newer versions)."""
    c = _Claude(parent.session_id, "/home/ana/webapp")
    c.entry("user", "Check which tests cover web/forms.py", side=True, agentId="a1b2c3")
    c.entry(
        "assistant",
        [
            {
                "type": "tool_use",
                "id": "toolu_x1",
                "name": "Bash",
                "input": {"command": "grep -rl forms tests/"},
            }
        ],
        side=True,
        agentId="a1b2c3",
    )
    c.entry(
        "user",
        [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_x1",
                "is_error": True,
                "content": "Exit code 2\ngrep: tests/: No such file or directory",
            }
        ],
        side=True,
        agentId="a1b2c3",
    )
    c.entry(
        "assistant",
        [{"type": "text", "text": "No tests directory at the root."}],
        side=True,
        agentId="a1b2c3",
    )
    path = _jsonl(
        parent.path.parent / parent.session_id / "subagents" / "agent-a1b2c3.jsonl", c.rows
    )
    return Expected(path, "claude-code", parent.session_id, [], [], ["grep -rl forms tests/"], [])


def write_claude(root: Path) -> list[Expected]:
    one = claude_session_one(root)
    return [
        one,
        claude_session_two(root),
        claude_session_recent(root),
        claude_subagent_file(root, one),
    ]


# ---------------------------------------------------------------- OpenAI Agents SDK


def agents_items_one() -> tuple[list[dict[str, Any]], Expected]:
    task = "What is the refund policy for order 4411?"
    final = "Order 4411 is refundable until 2026-12-01 per docs/refunds.md."
    items = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": task},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "zzz"},
        {
            "type": "function_call",
            "call_id": "fc_1",
            "name": "lookup_order",
            "arguments": json.dumps({"order_id": 4411, "api_key": OPENAI_KEY}),
            "id": "fc1",
        },
        {
            "type": "function_call_output",
            "call_id": "fc_1",
            "output": "order 4411: delivered 2026-11-01; policy docs/refunds.md",
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": final, "annotations": []}],
        },
    ]
    exp = Expected(
        Path(), "openai-agents", "support-4411", [task], [final], [], ["docs/refunds.md"]
    )
    return items, exp


def agents_items_two() -> tuple[list[dict[str, Any]], Expected]:
    task = "Export last month's tickets to reports/tickets.csv"
    final = "The export tool failed twice (timeout); reports/tickets.csv was not written."
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": task}]},
        {
            "type": "function_call",
            "call_id": "fc_9",
            "name": "export_tickets",
            "arguments": '{"path": "reports/tickets.csv"}',
        },
        {
            "type": "function_call_output",
            "call_id": "fc_9",
            "output": "An error occurred while running the tool: TimeoutError: export took > 30 s",
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": final}],
        },
    ]
    return items, Expected(
        Path(),
        "openai-agents",
        "user@example.com:thread 7",
        [task],
        [final],
        [],
        ["reports/tickets.csv"],
    )


def agents_db(path: Path) -> sqlite3.Connection:
    """A database laid out as the OpenAI Agents SDK's ``SQLiteSession`` lays it out (its
    tables made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE IF NOT EXISTS agent_sessions (session_id TEXT PRIMARY KEY,
            created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
            updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
        CREATE TABLE IF NOT EXISTS agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL, message_data TEXT NOT NULL,
            created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
            FOREIGN KEY (session_id) REFERENCES agent_sessions (session_id) ON DELETE CASCADE);
        CREATE INDEX IF NOT EXISTS idx_agent_messages_session_id
            ON agent_messages (session_id, id);
        """
    )
    return conn


def write_agents_db(path: Path) -> list[Expected]:
    """The two Agents SDK sessions in one database, and a row that is not JSON."""
    conn = agents_db(path)
    found = []
    for n, (items, exp) in enumerate((agents_items_one(), agents_items_two())):
        conn.execute("INSERT INTO agent_sessions (session_id) VALUES (?)", (exp.session_id,))
        for i, item in enumerate(items):
            conn.execute(
                "INSERT INTO agent_messages (session_id, message_data, created_at) "
                "VALUES (?, ?, ?)",
                (exp.session_id, json.dumps(item), f"2026-11-2{2 + n} 12:00:{i:02d}"),
            )
        exp.path = path
        found.append(exp)
    conn.execute(
        "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
        ("support-4411", "{not json"),
    )
    conn.commit()
    conn.close()
    return found


def add_agents_rows(path: Path, session_id: str, items: list[dict[str, Any]]) -> None:
    conn = sqlite3.connect(path)
    for item in items:
        conn.execute(
            "INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
            (session_id, json.dumps(item)),
        )
    conn.commit()
    conn.close()


def write_input_list(path: Path) -> Expected:
    """``result.to_input_list()`` written as a JSON list."""
    items, exp = agents_items_one()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(items, indent=2), encoding="utf-8")
    exp.path, exp.session_id, exp.format = path, path.stem, "responses"
    return exp


# ---------------------------------------------------------------- plain Responses / chat


def write_chat(path: Path) -> Expected:
    task = "Convert utils/dates.py to use zoneinfo instead of pytz"
    final = "utils/dates.py now uses zoneinfo; the pytz import is gone."
    messages = [
        {"role": "system", "content": "You are a coding assistant."},
        {"role": "user", "content": task},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "run",
                        "arguments": json.dumps({"cmd": "python -m pytest"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": f"exit_code: 1\nModuleNotFoundError: pytz; token {GITHUB_TOKEN}",
        },
        {"role": "assistant", "content": final},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": "gpt-4o", "messages": messages}), encoding="utf-8")
    return Expected(path, "chat", path.stem, [task], [final], [], ["utils/dates.py"])


def write_chat_jsonl(path: Path) -> Expected:
    """Chat Completions messages one a line, with a failed tool call and a correction."""
    task = "Why is the nightly backup job in ops/backup.sh slow?"
    fix = "Do not suggest rsync --delete here; the archive must keep old files."
    final = "ops/backup.sh compresses twice; drop the gzip step (rsync already compresses)."
    messages = [
        {"role": "user", "content": task},
        {
            "role": "assistant",
            "content": "Let me time it.",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {
                        "name": "shell",
                        "arguments": json.dumps({"cmd": "time ops/backup.sh"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "t1",
            "content": "exit_code: 1\nops/backup.sh: line 9: gzip: Broken pipe",
        },
        {"role": "user", "content": fix},
        {"role": "assistant", "content": final},
    ]
    _jsonl(path, messages)
    return Expected(path, "chat", path.stem, [task, fix], [final], [], ["ops/backup.sh"])


def write_responses_jsonl(path: Path) -> Expected:
    task = "Summarise CHANGELOG.md for the 2.0 release"
    final = "2.0 drops Python 3.9 and adds the async client (see CHANGELOG.md)."
    items = [
        {"type": "message", "role": "developer", "content": "Be terse."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]},
        {
            "type": "function_call",
            "call_id": "r1",
            "name": "read_file",
            "arguments": json.dumps({"path": "CHANGELOG.md"}),
        },
        {"type": "function_call_output", "call_id": "r1", "output": "## 2.0\n- drop 3.9"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": final}],
        },
    ]
    _jsonl(path, items)
    return Expected(path, "responses", path.stem, [task], [final], [], ["CHANGELOG.md"])


def write_all(root: Path) -> list[Expected]:
    """Every fixture under ``root``: ``codex/``, ``claude/``, ``agents/``, ``plain/``."""
    return [
        *write_codex(root / "codex"),
        *write_claude(root / "claude"),
        *write_agents_db(root / "agents" / "conversations.db"),
        write_input_list(root / "agents" / "support-run.json"),
        write_chat(root / "plain" / "chat-dates.json"),
        write_chat_jsonl(root / "plain" / "chat-backup.jsonl"),
        write_responses_jsonl(root / "plain" / "changelog.jsonl"),
    ]
