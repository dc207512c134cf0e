"""The live-edit policy a run's ``Memory`` and ``Filesystem`` capabilities share
(``memory.live_edit.LiveEditPolicy``): one a run, redacting guarded memory files, keeping a
proposing directory's writes in its overlay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sandmem.memory.live_edit import LiveEditPolicy, run_policy
from sandmem.redaction import Redactor
from sandmem.sandboxes import SandboxSession

SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


def add(path: str, line: str) -> str:
    return f"*** Begin Patch\n*** Add File: {path}\n+{line}\n*** End Patch\n"


def test_one_policy_a_run() -> None:
    extras: dict[Any, Any] = {}
    first = run_policy(extras)
    assert run_policy(extras) is first and extras == {LiveEditPolicy: first}
    assert run_policy({}) is not first  # another run, another policy


@pytest.fixture(autouse=True)
def memories_dir(sandbox: SandboxSession) -> None:
    (Path(sandbox.root) / "memories").mkdir()


async def test_guarded_writes_are_redacted_and_others_are_not(sandbox: SandboxSession) -> None:
    policy = LiveEditPolicy()
    policy.guard("memories", Redactor())
    await policy.apply(sandbox, add("memories/notes.md", f"key {SECRET}"))
    await policy.apply(sandbox, add("src/notes.md", f"key {SECRET}"))
    root = Path(sandbox.root)
    assert SECRET not in (root / "memories" / "notes.md").read_text()
    assert SECRET in (root / "src" / "notes.md").read_text()


async def test_a_proposing_directory_writes_to_its_overlay(sandbox: SandboxSession) -> None:
    policy = LiveEditPolicy()
    policy.guard("memories", Redactor())
    policy.propose("memories")
    assert policy.overlay("other") == {}
    await policy.apply(sandbox, add("memories/MEMORY.md", f"a fact {SECRET}"))
    assert not (Path(sandbox.root) / "memories" / "MEMORY.md").exists()
    written = policy.overlay("memories")["memories/MEMORY.md"]
    assert written is not None and b"a fact" in written and SECRET.encode() not in written
    policy.propose("memories")  # a new proposal starts empty
    assert policy.overlay("memories") == {}


async def test_without_a_guard_a_patch_is_applied_as_it_is(sandbox: SandboxSession) -> None:
    await LiveEditPolicy().apply(sandbox, add("memories/notes.md", "plain"))
    assert (Path(sandbox.root) / "memories" / "notes.md").read_text() == "plain\n"
