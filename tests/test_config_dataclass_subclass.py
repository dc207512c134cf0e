"""Code written for the reference SDK subclasses its configs with ``@dataclass`` (they are
dataclasses there). Each public config must accept that: the decorated subclass defines, builds,
takes the base's fields and its own, and validates as before. Each case runs in a fresh
interpreter, because the failure it guards against (a deferred pydantic build run while
``@dataclass`` walks the class) only shows on a config nobody has used yet in the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# (import path, a base field and a value for it); the dataclass configs need their required args
CONFIGS: list[tuple[str, str, str, str]] = [
    ("sandmem", "ModelSettings", "temperature", "0.25"),
    ("sandmem", "Reasoning", "effort", "'low'"),
    ("sandmem", "ModelRetrySettings", "max_retries", "2"),
    ("sandmem", "ModelRetryBackoffSettings", "initial_delay", "1.5"),
    ("sandmem", "MemoryLayoutConfig", "memories_dir", "'mem'"),
    ("sandmem", "MemoryReadConfig", "live_update", "False"),
    ("sandmem", "MemoryScopesConfig", "personal", "False"),
    ("sandmem", "MemoryGenerateConfig", "phase_one_model", "'extractive'"),
    ("sandmem", "RunConfig", "workflow_name", "'w'"),
    ("sandmem", "SandboxRunConfig", "cwd", "'src'"),
]

SCRIPT = """
from __future__ import annotations
from dataclasses import dataclass, fields, is_dataclass
from {module} import {name} as Base

@dataclass
class Mine(Base):
    note: str = "default note"

plain = Mine()
assert plain.note == "default note", plain.note
made = Mine({field}={value}, note="mine")
assert made.{field} == {value}, made.{field}
assert made.note == "mine"
assert isinstance(made, Base) and is_dataclass(Mine)
assert "note" in [f.name for f in fields(Mine)]

if hasattr(Base, "model_fields"):  # a frozen dataclass may not extend a plain dataclass
    @dataclass(frozen=True)
    class Frozen(Base):
        pass

    assert Frozen({field}={value}).{field} == {value}
    try:
        Mine(note=["not", "a", "string"])
    except ValueError:
        pass
    else:
        raise AssertionError("the subclass's own field is not validated")
    assert Mine({field}={value}) == Mine({field}={value})
print("ok")
"""


@pytest.mark.parametrize(("module", "name", "field", "value"), CONFIGS, ids=[c[1] for c in CONFIGS])
def test_dataclass_subclass_of_public_config(
    module: str, name: str, field: str, value: str
) -> None:
    code = textwrap.dedent(SCRIPT).format(module=module, name=name, field=field, value=value)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_every_public_config_is_covered() -> None:
    import sandmem

    public = {
        name
        for name in sandmem.__all__
        if name.endswith(("Config", "Settings")) and isinstance(getattr(sandmem, name), type)
    }
    assert public <= {c[1] for c in CONFIGS}
