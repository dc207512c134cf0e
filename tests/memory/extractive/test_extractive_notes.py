"""Notes given over MCP (``memory_remember``) are filed by their declared kind, and a sentence
that says where something lives is a fact, not a preference (issue 39, item 12)."""

from __future__ import annotations

import pytest
from memory_doubles import consolidated, extracted

from sandmem.memory._types import SelectedMemory
from sandmem.memory.extractive._salience import classify
from sandmem.memory.rollouts import note_segment, read_note, segment_line

SESSION = "sess-7f3a9b21c0"


def _note(rid: str, text: str, kind: str) -> SelectedMemory:
    source = {"via": "MCP (stdio)", "client": "claude-code 1.0", "session": SESSION}
    line = segment_line(note_segment(rid, text, kind=kind, source=source)).decode()
    return extracted(rid, line)


def _preferences(summary: str) -> str:
    if "## User preferences" not in summary:
        return ""
    return summary.split("## User preferences", 1)[1].split("\n## ", 1)[0]


NOTES = [
    (
        "n-proc",
        "To release, run `make dist` then `twine upload dist/*` from the repo root.",
        "procedure",
    ),
    (
        "n-cred",
        "The API credentials live in ~/.config/acme/credentials.toml, never in the repo.",
        "fact",
    ),
    (
        "n-key",
        "Do not look for the deploy key in git; it is stored in the 1Password vault Ops.",
        "fact",
    ),
    ("n-pref", "Always run the linters before committing.", "preference"),
]


@pytest.mark.parametrize(("rid", "text", "kind"), NOTES)
def test_a_note_is_filed_by_its_kind_never_as_a_task(rid: str, text: str, kind: str) -> None:
    memory = _note(rid, text, kind)
    label = kind.capitalize()
    assert f'- {label}: "{text}"' in memory.raw_memory
    assert "- Task:" not in memory.raw_memory
    assert "to remember" not in memory.raw_memory + memory.rollout_summary
    assert SESSION not in memory.raw_memory + memory.rollout_summary


def test_consolidated_notes_keep_their_kinds_and_no_session_id() -> None:
    out = consolidated([_note(*n) for n in NOTES])
    prefs = _preferences(out.memory_summary_md)
    assert "Always run the linters before committing." in prefs
    assert "credentials" not in prefs and "deploy key" not in prefs and "twine" not in prefs
    assert '- Procedure: "To release' in out.memory_md
    assert '- Fact: "The API credentials' in out.memory_md
    for line in out.memory_md.splitlines():
        if line.startswith("Keywords:"):
            words = line.lower()
            assert "procedure" not in words and "remember" not in words
            assert "sess" not in words and "7f3a9b21c0" not in words
    assert SESSION not in out.memory_md + out.memory_summary_md


def test_a_plain_note_is_still_a_task_without_its_marker() -> None:
    memory = _note("n-plain", "Look at the flaky upload test next week.", "note")
    assert '- Task: "Look at the flaky upload test next week."' in memory.raw_memory
    assert "to remember" not in memory.raw_memory


@pytest.mark.parametrize(
    "sentence",
    [
        "The API credentials live in ~/.config/acme/credentials.toml, never in the repo.",
        "Secrets are kept in Vault, never in .env files.",
        "The staging token is stored in ~/.netrc instead of the config.",
        "Our kubeconfig sits under ~/.kube/prod, not the default path.",
        "Credentials are never in git; they are in the CI secret store.",
    ],
)
def test_where_something_lives_is_a_fact(sentence: str) -> None:
    assert classify(sentence, first=False) == "fact"


@pytest.mark.parametrize(
    "sentence",
    [
        "Never commit credentials to the repo.",
        "Always keep secrets in Vault.",
        "I prefer the config stored in ~/.config/acme.",
        "Don't put tokens in the repo, keep them in ~/.netrc.",
        "Please make sure logs go in /var/log/acme from now on.",
    ],
)
def test_instructions_about_where_things_go_stay_preferences(sentence: str) -> None:
    assert classify(sentence, first=False) == "preference"


@pytest.mark.parametrize(
    "message",
    [
        "hello\n\n(A secret to remember.)",
        "(A fact to remember.) at the start",
        "a fact to remember.",
        "text (A fact to remember.)",
    ],
)
def test_only_the_marker_note_segment_writes_is_read_as_a_note(message: str) -> None:
    assert read_note(message) is None
    assert read_note("The port is 8080.\n\n(A fact to remember.)") == ("fact", "The port is 8080.")
