"""SPEC §3.1: memory configuration defaults and validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandmem import ModelSettings
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import MemoryGenerateConfig, MemoryLayoutConfig, MemoryReadConfig
from sandmem.sandboxes import Manifest, UnixLocalSandboxClient


def test_defaults() -> None:
    config = MemoryGenerateConfig()
    assert config.max_raw_memories_for_consolidation == 256
    assert config.phase_one_model == "gpt-5.4-mini"
    assert config.phase_two_model == "gpt-5.5"
    assert config.phase_one_model_settings == ModelSettings(reasoning={"effort": "medium"})
    assert config.phase_two_model_settings == ModelSettings(reasoning={"effort": "medium"})
    assert config.extra_prompt is None
    assert config.phase_one_concurrency is None  # adaptive
    assert config.phase_one_max_concurrency == 16
    assert config.max_attempts == 3
    assert config.flush_timeout_s == 600
    layout = MemoryLayoutConfig()
    assert (layout.memories_dir, layout.sessions_dir) == ("memories", "sessions")
    assert MemoryReadConfig().live_update is True


@pytest.mark.parametrize("cap", [0, -1, 4097])
def test_cap_out_of_range_is_value_error(cap: int) -> None:
    with pytest.raises(ValueError):
        MemoryGenerateConfig(max_raw_memories_for_consolidation=cap)


@pytest.mark.parametrize("cap", [1, 4096])
def test_cap_bounds_inclusive(cap: int) -> None:
    assert MemoryGenerateConfig(max_raw_memories_for_consolidation=cap)


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MemoryGenerateConfig(phase_one_concurrency=0)


def test_settings_accept_dict_and_none() -> None:
    config = MemoryGenerateConfig(
        phase_one_model_settings={"reasoning": {"effort": "low"}}, phase_two_model_settings=None
    )
    assert config.phase_one_model_settings == ModelSettings(reasoning={"effort": "low"})
    assert config.phase_two_model_settings is None
    with pytest.raises(ValueError):
        MemoryGenerateConfig(phase_one_model_settings={"no_such_field": 1})


@pytest.mark.parametrize(
    "value",
    [
        *("", "  ", "/abs/memories", "../up", "a/../../b", ".", "./"),
        # issue 25: names a job message may carry, that no directory should have
        *("mem\x00ories", "mem\x1b[2J", "mem\u202eories", "m" * 1100, "a/" + "x" * 300),
    ],
)
def test_layout_dirs_must_be_relative_and_inside(value: str) -> None:
    with pytest.raises(ValueError):
        MemoryLayoutConfig(memories_dir=value)
    with pytest.raises(ValueError):
        MemoryLayoutConfig(sessions_dir=value)


def test_layout_dirs_are_normalised() -> None:
    layout = MemoryLayoutConfig(memories_dir="./memories/gtm/", sessions_dir="sessions//gtm")
    assert (layout.memories_dir, layout.sessions_dir) == ("memories/gtm", "sessions/gtm")


@pytest.mark.parametrize("spelled", ["team//memory", "./team/memory/", "team/./memory"])
async def test_prompts_keep_the_layout_spelling_and_files_use_the_normal_form(
    spelled: str, tmp_path: Path
) -> None:
    layout = MemoryLayoutConfig(memories_dir=spelled)
    assert layout.memories_dir == "team/memory" and layout.spelled("memories_dir") == spelled
    # spelled differently, the same directories are the same layout
    assert layout == MemoryLayoutConfig(memories_dir="team/memory")
    assert len({layout, MemoryLayoutConfig(memories_dir="team/memory")}) == 1
    session = await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path / "ws"))
    async with session:
        await session.write("team/memory/memory_summary.md", "Deploys go through make.\n")
        memory = Memory(layout=layout, generate=None)
        memory.bind(session)
        prompt = await memory.instructions(session.state.manifest) or ""
    assert f"`{spelled}/memory_summary.md`" in prompt and f"{spelled}/MEMORY.md" in prompt
    assert "Deploys go through make." in prompt


def test_a_backslash_is_part_of_a_directory_name() -> None:
    # as on POSIX: not a separator, so it neither splits nor climbs
    assert MemoryLayoutConfig(memories_dir="team\\memory").memories_dir == "team\\memory"
    assert MemoryLayoutConfig(memories_dir="..\\up").memories_dir == "..\\up"
    with pytest.raises(ValueError, match="memories_dir must not escape root"):
        MemoryLayoutConfig(memories_dir="../up")


@pytest.mark.parametrize(
    ("memories", "sessions", "message"),
    [
        ("m", "m", "must be different"),
        ("./m/", "m", "must be different"),
        ("memories", "memories/sessions", "must not nest"),
        ("sessions/memories", "sessions", "must not nest"),
    ],
)
def test_layout_dirs_must_differ_and_not_nest(memories: str, sessions: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MemoryLayoutConfig(memories_dir=memories, sessions_dir=sessions)
    # siblings, and directories that only share a name prefix, are fine
    MemoryLayoutConfig(memories_dir="data/memories", sessions_dir="data/sessions")
    MemoryLayoutConfig(memories_dir="mem", sessions_dir="memories")


def test_memory_needs_read_or_generate() -> None:
    with pytest.raises(ValueError):
        Memory(read=None, generate=None)
    assert Memory(generate=None).generate is None
    assert Memory(read=None).read is None


def test_required_capabilities() -> None:
    assert Memory().required_capability_types() == {Shell, Filesystem}
    assert Memory(read=MemoryReadConfig(live_update=False)).required_capability_types() == {Shell}
    assert Memory(read=None).required_capability_types() == frozenset()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/abs", "must be relative"),
        ("../up", "must not escape root"),
        ("", "must be non-empty"),
        (".", "must be non-empty"),
    ],
)
@pytest.mark.parametrize("field", ["memories_dir", "sessions_dir"])
def test_layout_errors_use_the_reference_wording(field: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"{field} {message}"):
        MemoryLayoutConfig(**{field: value})


@pytest.mark.parametrize(
    ("cap", "message"),
    [(0, "must be greater than 0"), (4097, "must be less than or equal to 4096")],
)
def test_raw_memory_cap_errors_use_the_reference_wording(cap: int, message: str) -> None:
    with pytest.raises(
        ValueError, match=f"MemoryGenerateConfig.max_raw_memories_for_consolidation {message}"
    ):
        MemoryGenerateConfig(max_raw_memories_for_consolidation=cap)


@pytest.mark.parametrize("field", ["phase_one_model_settings", "phase_two_model_settings"])
def test_model_settings_of_the_wrong_type_are_a_type_error(field: str) -> None:
    with pytest.raises(TypeError, match=f"MemoryGenerateConfig.{field} must be a ModelSettings"):
        MemoryGenerateConfig(**{field: "fast"})


def test_memory_without_read_and_generate_names_both() -> None:
    with pytest.raises(ValueError, match="requires at least one of `read` or `generate`"):
        Memory(read=None, generate=None)


def test_for_model_is_the_one_model_form() -> None:
    assert MemoryGenerateConfig.for_model(None) == MemoryGenerateConfig()
    extractive = MemoryGenerateConfig.for_model("extractive", max_attempts=5)
    assert (extractive.phase_one_model, extractive.phase_two_model) == ("extractive", "extractive")
    assert extractive.max_attempts == 5
    named = MemoryGenerateConfig.for_model("local-model")
    assert (named.phase_one_model, named.phase_two_model) == ("local-model", "local-model")
    # the server's own settings: a user's model may or may not take reasoning settings
    assert named.phase_one_model_settings is None and named.phase_two_model_settings is None
