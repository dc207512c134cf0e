"""What an agent or a caller controls cannot leave a secret on disk: a secret written through
``exec_command`` in any encoding, a secret-shaped conversation id, a large or non-UTF-8 memory
file (issue 25, class 5). Each class is tried with several cases, not only the example."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from memory_doubles import steps_model as _script

from sandmem import (
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
from sandmem.redaction import Redactor
from sandmem.testing import tool_call

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
