"""What an agent or a caller controls cannot leave a secret on disk: a secret written through
``exec_command`` in any encoding, a secret-shaped conversation id, a large or non-UTF-8 memory
file (issue 25, class 5), and a model that repeats a secret it saw in every memory file it
writes. Each class is tried with several cases, not only the example."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from memory_doubles import steps_model as _script

from sandmem import (
    File,
    Filesystem,
    Manifest,
    Memory,
    MemoryGenerateConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    UnixLocalSandboxClient,
)
from sandmem.memory.generation._redact_pass import MemoryRedactionPass
from sandmem.memory.rollouts import conversation_rollout_id
from sandmem.models._base import ModelRequest
from sandmem.redaction import Redactor
from sandmem.testing import FunctionModel, last_user_text, tool_call, tool_outputs

_rng = random.Random(25)


TOKEN = "ghp_" + "".join(_rng.choice("ABCDEFabcdef0123456789") for _ in range(36))


KEY = "sk-proj-" + "".join(_rng.choice("ABCDEFabcdef0123456789_-") for _ in range(60)) + "A1b"


EXTRACTIVE = MemoryGenerateConfig(phase_one_model="extractive", phase_two_model="extractive")


def _on_disk(root: Path) -> str:
    return "\n".join(
        p.read_text(errors="replace")
        for d in ("sessions", "memories")
        for p in (root / d).rglob("*")
        if p.is_file()
    )


# -- class 5: redaction on values, in every encoding ---------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [
        f"cat > .env <<'EOF'\n{TOKEN}\nEOF",
        f"cat > .env <<'EOF'\n\tOPENAI_API_KEY={KEY}\nEOF",
        f'printf "%s\\n" "{TOKEN}" > t.txt',
        f"curl 'https://api.example.com/?q=x%26token%3D{TOKEN[4:]}'",
        # coloured output (round 4): the colour code's letter was read as part of the token
        f'echo -e "\\e[1;32m{TOKEN}\\e[0m"',
        f"printf '\\033[31m%s\\033[0m\\n' {KEY}",
    ],
    ids=["heredoc", "heredoc-tab", "printf", "url-encoded", "echo-e-colour", "printf-colour"],
)
async def test_a_secret_written_through_exec_command_never_reaches_sessions(cmd: str) -> None:
    agent = SandboxAgent(
        name="writer",
        model=_script([tool_call("exec_command", {"cmd": cmd})], "done"),
        capabilities=[Memory(read=None, generate=EXTRACTIVE), Filesystem(), Shell()],
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(agent, "write the env file", run_config=run, conversation_id="heredoc")
    text = _on_disk(sandbox.root)
    assert "[REDACTED:" in text
    for secret in (TOKEN, TOKEN[4:], KEY, KEY[8:40]):
        assert secret not in text
    await client.delete(sandbox)


@pytest.mark.parametrize(
    "key", [TOKEN, f"alice:{TOKEN}", f"ticket {KEY}", f"  {TOKEN}  "], ids=["bare", "a", "b", "c"]
)
def test_a_secret_shaped_conversation_id_is_mapped_before_it_names_anything(key: str) -> None:
    rollout_id, original = conversation_rollout_id(key)
    assert original == key
    assert TOKEN not in rollout_id and KEY not in rollout_id and KEY[8:30] not in rollout_id
    assert Redactor().redact(rollout_id) == rollout_id  # the stop-time pass leaves it alone
    assert conversation_rollout_id(key) == (rollout_id, key)  # deterministic


async def test_a_large_or_not_utf8_memory_file_is_still_redacted() -> None:
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest())
    big = ("x" * 1000 + "\n") * 20_000 + f"GH_TOKEN={TOKEN}\n"  # 20 MB, past the old limit
    async with sandbox:
        await sandbox.write("memories/big.md", big)
        await sandbox.write("memories/bin.md", b"\xff\xfe token: " + TOKEN.encode() + b"\n\x80")
        rewritten = await MemoryRedactionPass(sandbox, "memories", Redactor()).run()
        assert sorted(rewritten) == ["memories/big.md", "memories/bin.md"]
    assert TOKEN not in (sandbox.root / "memories/big.md").read_text()
    binary = (sandbox.root / "memories/bin.md").read_bytes()
    assert TOKEN.encode() not in binary
    assert binary.startswith(b"\xff\xfe token: [REDACTED:") and binary.endswith(b"\n\x80")
    await client.delete(sandbox)


# -- a model that repeats a secret it saw (merged from test_memory_secrets.py) ----------

MODEL_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
AWS = "AKIA" + "QWERTYUIOPASDFGH"
ENV = f"OPENAI_API_KEY={MODEL_KEY}\nAWS_ACCESS_KEY_ID={AWS}\nHOME=/root\n"


def leaky_phase_one(request: ModelRequest) -> str:
    # a careless model that copies the transcript (and any secret in it) into memory
    text = last_user_text(request)
    # a quote, not the whole transcript: a summary mostly copied from it is refused
    quoted = " ".join(line for line in text.splitlines() if "key" in line)[:400]
    return json.dumps(
        {
            "rollout_slug": "inspect-env",
            "rollout_summary": f"Transcript: {quoted} and the key was {MODEL_KEY}",
            "raw_memory": f"- key {MODEL_KEY} and {AWS}",
        }
    )


def leaky_phase_two(request: ModelRequest) -> object:
    if tool_outputs(request):
        return "done"
    return [
        tool_call(
            "write_file", {"path": "memories/MEMORY.md", "content": f"## Env\n{MODEL_KEY}\n"}
        ),
        tool_call("write_file", {"path": "memories/memory_summary.md", "content": f"key {AWS}"}),
        tool_call("write_file", {"path": "memories/skills/env/SKILL.md", "content": MODEL_KEY}),
    ]


def agent_model(request: ModelRequest) -> object:
    if tool_outputs(request):
        return f"The key is {MODEL_KEY}"
    return [tool_call("exec_command", {"cmd": "cat .env"})]


async def test_a_model_that_repeats_a_secret_leaves_it_nowhere() -> None:
    """The command's output holds keys; the run's answer, phase one's summary and raw memory
    and phase two's MEMORY.md, summary and skill repeat them: none reaches disk."""
    config = MemoryGenerateConfig(
        phase_one_model=FunctionModel(leaky_phase_one),
        phase_two_model=FunctionModel(leaky_phase_two),
    )
    agent = SandboxAgent(
        name="leaky",
        model=FunctionModel(agent_model),
        capabilities=[Memory(generate=config), Filesystem(), Shell()],
    )
    client = UnixLocalSandboxClient()
    sandbox = await client.create(manifest=Manifest(entries={".env": File(content=ENV.encode())}))
    async with sandbox:
        run = RunConfig(sandbox=SandboxRunConfig(session=sandbox))
        await Runner.run(
            agent, f"Check my env; my key is {MODEL_KEY}", run_config=run, conversation_id="env"
        )
    root: Path = sandbox.root
    written = [p for d in ("sessions", "memories") for p in (root / d).rglob("*") if p.is_file()]
    assert len(written) >= 8
    for path in written:
        text = path.read_text(errors="replace")
        assert MODEL_KEY not in text, path
        assert AWS not in text, path
        assert MODEL_KEY[8:30] not in text, path
    rollout = (root / "sessions/env.jsonl").read_text()
    assert "[REDACTED:" in rollout
    assert "[REDACTED:" in (root / "memories/skills/env/SKILL.md").read_text()
