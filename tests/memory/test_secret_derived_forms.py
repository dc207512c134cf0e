"""A secret leaves no derived form on disk: what sandmem makes of it when it derives text from a
transcript (a rollout summary's lower-case slug and file name, a skill's name, MEMORY.md's
``Keywords:`` words and headings, a quote cut at an ellipsis, an upper-cased copy) is taken out
with it, at write time (a configured pattern, phase one) and by ``redact-history`` (a pattern
given later: files renamed, every reference and the history following)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from memory_doubles import scripted_agent

from sandmem import RunConfig, Runner, SandboxAgent, SandboxRunConfig
from sandmem import memory as api
from sandmem.capabilities import Filesystem, Shell
from sandmem.capabilities.memory import Memory
from sandmem.memory import (
    EXTRACTIVE,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    MemoryReadConfig,
    history,
    journal,
    tombstones,
)
from sandmem.memory._redact_names import Renamer
from sandmem.memory._secret_forms import (
    SecretForms,
    clean_name,
    rollout_secret_values,
    secret_values,
)
from sandmem.memory.extractive._groups import _WORD as KEYWORD
from sandmem.memory.extractive._text import clip, slugify
from sandmem.memory.history import Attribution
from sandmem.memory.layout import MemoryPaths
from sandmem.models._base import ModelRequest
from sandmem.redaction import Redactor
from sandmem.sandboxes import Manifest, SandboxSession, UnixLocalSandboxClient
from sandmem.testing import FunctionModel, tool_call

SECRET = "ACME-PROJ-77x9"
PATTERN = r"ACME-PROJ-\d+x\d"
RULE = Redactor([("history", PATTERN)], defaults=False)
#: every word of the secret, in any case, anywhere (names included): what must be gone
WORDS = re.compile(rb"(?i)acme|proj|77x9")
EXPLICIT = MemoryGenerateConfig(
    phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE, schedule="explicit"
)
EXTRACT = MemoryGenerateConfig(phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE)
PATHS = MemoryPaths.of(MemoryLayoutConfig())


def forms(*texts: str) -> SecretForms:
    return SecretForms.found(RULE, texts or (f"the key is {SECRET}",))


# ---------------------------------------------------------------- the forms, one by one


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("deploy acme-proj-77x9 now", "deploy [REDACTED:history] now"),  # a slug's lower case
        ("DEPLOY ACME-PROJ-77X9 NOW", "DEPLOY [REDACTED:history] NOW"),  # upper case
        ("deploy Acme_Proj_77X9 now", "deploy [REDACTED:history] now"),  # other separators
        ("deploy acme proj 77x9 now", "deploy [REDACTED:history] now"),  # words apart
        ("deploy acmeproj77x9 now", "deploy [REDACTED:history] now"),  # none
        ("deploy acme.proj.77x9 now", "deploy [REDACTED:history] now"),
    ],
)
def test_every_case_and_separator_of_the_secret_is_redacted(text: str, expected: str) -> None:
    assert forms().redact(text) == expected


def test_an_accented_secret_is_redacted_in_its_ascii_folded_form() -> None:
    found = SecretForms.found(Redactor([("k", r"Pässwört-\d+")], defaults=False), ["Pässwört-2026"])
    assert (
        found.redact("slug passwort-2026 and PÄSSWÖRT-2026") == "slug [REDACTED:k] and [REDACTED:k]"
    )
    assert found.redact_name("fix-passwort-2026.md") == "fix-redacted.md"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("## Deploy ACME-PR…", "## Deploy [REDACTED:history]…"),  # a heading cut mid-secret
        ("quote: acme-proj-7...", "quote: [REDACTED:history]..."),
        ("…OJ-77x9 was the key", "…[REDACTED:history] was the key"),  # a suffix after a cut
        ("x deployACMEP…", "x deploy[REDACTED:history]…"),  # glued to the word before
        ("cut here acm…", "cut here acm…"),  # three letters: too little to be the secret
    ],
)
def test_a_secret_cut_at_an_ellipsis_is_redacted(text: str, expected: str) -> None:
    assert forms().redact(text) == expected


def test_keywords_lose_every_word_of_the_secret_and_prose_keeps_its_words() -> None:
    text = (
        "## Deploy\n"
        "Keywords: acme, credential, deploy/acme_proj/env.yaml, proj, 77x9, acmep, rotate\n"
        "**Keywords:** ACME, staging\n"
        "- the acme corp runs the staging cluster\n"
    )
    clean = forms().redact(text)
    lines = clean.splitlines()
    assert lines[1] == (
        "Keywords: [REDACTED:history], credential, "
        "deploy/[REDACTED:history]/env.yaml, [REDACTED:history], [REDACTED:history], "
        "[REDACTED:history], rotate"
    )
    assert lines[2] == "**Keywords:** [REDACTED:history], staging"
    assert lines[3] == "- the acme corp runs the staging cluster"  # prose: only whole forms


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("run-1_deploy-acme-proj-77x9.md", "run-1_deploy-redacted.md"),
        ("rotate-acme-proj.md", "rotate-redacted.md"),  # a slug cut at a word boundary
        ("deploy-acmep.md", "deploy-redacted.md"),  # a slug cut inside a word
        ("ACME_PROJ_77X9-runbook", "redacted-runbook"),  # a skill's folder, upper case
        ("SKILL.md", "SKILL.md"),
        ("deploy-notes.md", "deploy-notes.md"),
    ],
)
def test_a_name_loses_every_part_of_the_secret(name: str, expected: str) -> None:
    assert clean_name(name, RULE, forms()) == expected


TOKEN = "ghp_" + "Zq8Wm3Rt6Yp1Lk4Hn7Bv2Cx5Jd9Fs0Ga3EkQ"
OPENAI = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        # names the layout fixes stay, even when a secret's word is part of them
        ("MEMORY.md", "MEMORY.md"),
        (".phase_two_commit.json", ".phase_two_commit.json"),
        ("skills/deploy/SKILL.md", "skills/deploy/SKILL.md"),
        ("raw_memories/ACME-PROJ-77x9.md", "raw_memories/ACME-PROJ-77x9.md"),  # a conversation
        (".history/objects/acme", ".history/objects/acme"),
        # a summary: its slug only, never its conversation's id
        (
            "rollout_summaries/ACME-PROJ-77x9_memory-acme.md",
            "rollout_summaries/ACME-PROJ-77x9_redacted.md",
        ),
        # planted names, anywhere
        ("notes-acme-proj.md", "notes-redacted.md"),
        ("raw_memories/notes-acme.md", "raw_memories/notes-redacted.md"),
        (f".{TOKEN}.md", ".redacted.md"),  # hidden: only what the rules see
        # copies by name follow their original
        (".store/base/skills/acme-proj-77x9/SKILL.md", ".store/base/skills/redacted/SKILL.md"),
        (".phase_two_backup/skills/x/acme.md", ".phase_two_backup/skills/x/redacted.md"),
    ],
)
def test_a_layout_name_is_cleaned_where_sandmem_derived_it(rel: str, expected: str) -> None:
    # "memory" and "commit" are words of a secret too: the layout's own names keep them
    found = SecretForms([(SECRET, "history"), ("commit-memory-9z", "history")])
    renamer = Renamer(Redactor([("history", PATTERN)]), found, {SECRET, "a1"})
    assert renamer.name(rel) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("proj-setup", "proj-setup"),  # a word anyone may choose: kept
        ("acme", "acme"),
        ("77x9-notes", "redacted-notes"),  # a random-looking word of the secret: out
        ("deploy-acme-proj-77x9", "deploy-redacted"),  # the whole secret, in any form: out
        ("ACME_PROJ_77X9", "redacted"),
    ],
)
def test_a_live_files_name_loses_the_secret_not_every_word_of_it(name: str, expected: str) -> None:
    """A name not derived from the secret's text (a skill's folder) loses the secret and its
    random-looking parts, not a plain word the secret happens to hold."""
    assert clean_name(name, RULE, forms(), words=False) == expected


def test_a_name_holding_the_secret_as_written_is_cleaned_by_the_rule_alone() -> None:
    assert clean_name(f"notes-{SECRET}.md", RULE, SecretForms()) == "notes-redacted.md"


def test_secrets_are_found_in_the_forms_escapes_hide_them() -> None:
    text = json.dumps({"k": "ACME-PROJ-\u0037\u0037x9"}, ensure_ascii=True).replace(
        "77", "\\u0037\\u0037"
    )
    assert ("ACME-PROJ-77x9", "history") in secret_values(RULE, text)


def _line(value: object) -> str:
    return json.dumps(value)


@pytest.mark.parametrize(
    "line",
    [
        _line({"text": f"my key is {SECRET} ok"}),  # plain, in a JSON string
        _line({"text": f'say "{SECRET}"\nnext'}),  # next to JSON's own escapes
        _line({"k": SECRET}).replace("77", "\\u0037\\u0037"),  # written as \u escapes
        _line({"arguments": _line({"cmd": f"export KEY={SECRET}"})}),  # JSON inside JSON
        _line({"out": f"\x1b[31m{SECRET[:6]}\x1b[0m{SECRET[6:]}"}),  # cut by colour codes
        _line({SECRET: "a key holds it"}),  # a key, not a value
        _line([[{"deep": [SECRET]}]]),  # nested
        f"not json at all {SECRET}",  # a line that does not parse
        "[" * 100_000 + f'"{SECRET}"' + "]" * 100_000,  # nested past the parser's limit
        _line({"t": f"{SECRET} and more"})[:-5],  # cut mid-line (a bounded rollout)
    ],
)
def test_a_rollouts_secrets_are_found_in_its_decoded_strings(line: str) -> None:
    text = "\n".join([_line({"type": "message", "text": "hello"}), line, _line({"n": 1})])
    assert (SECRET, "history") in rollout_secret_values(RULE, text)
    assert SecretForms.in_rollout(Redactor([], defaults=False), text, RULE)


def test_a_rollout_without_secrets_finds_none() -> None:
    text = "\n".join(_line({"text": f"line {n} with a path C:\\tmp\\x"}) for n in range(50))
    assert rollout_secret_values(RULE, text) == []
    assert not SecretForms.in_rollout(RULE, text)


def test_redacting_twice_changes_nothing_more() -> None:
    text = "Keywords: acme, proj\n## Deploy ACME-PR…\nacme-proj-77x9"
    once = forms().redact(text)
    assert forms().redact(once) == once
    assert not WORDS.search(once.encode())


def test_without_secrets_nothing_changes() -> None:
    empty = SecretForms.found(RULE, ["nothing secret here"])
    assert not empty
    assert empty.redact("Keywords: acme") == "Keywords: acme"
    assert empty.redact_name("acme.md") == "acme.md"


_SECRET_WORD = st.text("abcdefghjkmnpqrstuvwxyz0123456789", min_size=4, max_size=9)


@settings(max_examples=40, deadline=None)
@given(words=st.lists(_SECRET_WORD, min_size=2, max_size=4, unique=True), upper=st.booleans())
@example(words=["0000", "reda"], upper=False)  # a word inside the marker (a CI failure)
def test_sandmem_derivations_of_a_secret_keep_nothing_of_it(words: list[str], upper: bool) -> None:
    """The derivations sandmem itself applies (the extractive slug, a heading cut by ``clip``,
    the keyword words) leave no word of the secret once redacted."""
    secret = "-".join(w.upper() if upper else w for w in words)
    found = SecretForms([(secret, "k")])
    task = f"Rotate the {secret} credential of the staging deploy"
    derived = [
        slugify(task, 60),
        clip(f"Deploy it {secret}", 15 + len(secret) // 2),  # cut inside the secret
        "Keywords: " + ", ".join(KEYWORD.findall(task.lower())),
    ]
    for text in derived:
        clean = found.redact(text)
        name = found.redact_name(text.replace(" ", "-"))
        # The marker's own letters are not the secret's: a word such as "reda" is in "[REDACTED:k]".
        rest = (clean.lower().replace("[redacted:k]", "|"), name.lower().replace("redacted", "|"))
        for word in words:
            assert all(word not in part for part in rest), (text, clean, name)


# ---------------------------------------------------------------- redact-history


async def run(
    session: SandboxSession, rid: str, task: str, config: MemoryGenerateConfig, cmd: str = "true"
) -> None:
    """One run of conversation ``rid``: its agent runs ``cmd`` in its shell, then answers."""
    memory = Memory(layout=MemoryLayoutConfig(), generate=config, read=MemoryReadConfig())
    agent = SandboxAgent(
        name="dev",
        model=scripted_agent(
            lambda r: [tool_call("exec_command", {"cmd": cmd})], lambda r: "Done."
        ),
        capabilities=[memory, Filesystem(), Shell()],
    )
    await Runner.run(
        agent,
        task,
        run_config=RunConfig(sandbox=SandboxRunConfig(session=session)),
        conversation_id=rid,
    )


TASKS = {
    "a1": f"Rotate the {SECRET} deploy credential in deploy/{SECRET}/env.yaml",
    "a2": f"Check the {SECRET.lower()} deploy credential",
}


def leftovers(root: Path) -> list[str]:
    """Files under memories/ whose name or bytes hold a word of the secret (not the index:
    ``redact-history`` removes it)."""
    found = []
    for path in (root / "memories").rglob("*"):
        rel = str(path.relative_to(root))
        if WORDS.search(rel.encode()) or (path.is_file() and WORDS.search(path.read_bytes())):
            found.append(rel)
    return found


async def test_redact_history_takes_the_secret_out_of_names_keywords_and_headings(
    tmp_path: Path,
) -> None:
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        for rid, task in TASKS.items():
            await run(session, rid, task, EXTRACT)
    before = leftovers(tmp_path)
    assert any("rollout_summaries/a1_" in p for p in before)  # the known limit, reproduced
    assert re.search(r"(?m)^Keywords: .*acme", (tmp_path / "memories/MEMORY.md").read_text())
    result = await api.redact_history(tmp_path, PATTERN)
    assert leftovers(tmp_path) == []
    summaries = sorted(p.name for p in (tmp_path / "memories/rollout_summaries").iterdir())
    assert summaries == [
        "a1_rotate-redacted-deploy-credential-env-yaml.md",
        "a2_check-redacted-deploy-credential.md",
    ]
    assert sorted(result.renamed) == [f"rollout_summaries/{n}" for n in summaries]
    # every reference names the new file: the raw memory's header, MEMORY.md's Sources
    raw = (tmp_path / "memories/raw_memories/a1.md").read_text()
    assert f"rollout_summary_file: rollout_summaries/{summaries[0]}" in raw
    memory_md = (tmp_path / "memories/MEMORY.md").read_text()
    assert all(f"rollout_summaries/{n}" in memory_md for n in summaries)
    # the transcripts still hold it (they are not rewritten): reported, and forget works
    assert result.still_in == ["sessions/a1.jsonl", "sessions/a2.jsonl"]
    forgot = await api.forget(tmp_path, "a1")
    assert f"memories/rollout_summaries/{summaries[0]}" in forgot.removed


async def test_redact_history_renames_a_skill_in_the_files_the_history_and_a_proposal(
    tmp_path: Path,
) -> None:
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, "a2", TASKS["a2"], EXTRACT)
        skill = "skills/acme_proj_77X9-runbook/SKILL.md"  # named from the secret, upper case
        body = b"# Runbook\nRotate with `deploy ACME-PROJ-77x9`.\n"
        (tmp_path / "memories" / skill).parent.mkdir(parents=True)
        (tmp_path / "memories" / skill).write_bytes(body)
        async with session.lock(PATHS.lock):
            await history.make_version(
                session,
                PATHS,
                {skill: body},
                None,
                Attribution("hand_edit", client="acme-proj-77x9 cli"),
            )
        await journal.propose(session, PATHS, {skill: body + b"- more\n"}, Attribution("live_edit"))
    await api.redact_history(tmp_path, PATTERN)
    assert leftovers(tmp_path) == []
    new = "skills/redacted-runbook/SKILL.md"
    assert (
        tmp_path / "memories" / new
    ).read_text() == "# Runbook\nRotate with `deploy [REDACTED:history]`.\n"
    assert not (tmp_path / "memories/skills/acme_proj_77X9-runbook").exists()
    [edit] = [v for v in await api.log(tmp_path) if v.client == "[REDACTED:history] cli"]
    assert edit.redacted and edit.changed == [new]
    [proposal] = await api.inbox(tmp_path)  # its record still parses, under the new name
    assert new in proposal.diff and "- more" in proposal.diff
    await api.restore(tmp_path, edit.version)  # a renamed record restores its files
    assert (tmp_path / "memories" / new).exists()


async def test_redact_history_reports_a_conversation_id_that_holds_the_secret(
    tmp_path: Path,
) -> None:
    rid = "deploy-acme-proj-77x9"  # a valid id, no default rule knows it: it names files
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, rid, "Deploy the staging cluster", EXTRACT)
    result = await api.redact_history(tmp_path, PATTERN)
    assert result.still_in == [f"sessions/{rid}.jsonl"]
    # kept intact meanwhile (the conversation's key): forget removes the conversation whole
    assert (tmp_path / f"memories/raw_memories/{rid}.md").exists()
    forgot = await api.forget(tmp_path, rid)
    assert f"sessions/{rid}.jsonl" in forgot.removed
    assert leftovers(tmp_path) != []  # older versions, the generation log: history
    again = await api.redact_history(tmp_path, PATTERN)  # now no conversation's key
    assert again.still_in == []
    assert leftovers(tmp_path) == []
    # the note that keeps it forgotten is sealed: no secret, and still the id's
    note = (tmp_path / "sessions" / tombstones.FORGOTTEN_JSON).read_bytes()
    assert not WORDS.search(note) and tombstones.sealed(rid).encode() in note
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        found = await tombstones.load(session, PATHS)
        assert tombstones.find(found, rid) is not None  # ingest still refuses it
    undone = await api.forget(tmp_path, rid, undo=True)  # and forget --undo finds it
    assert undone.undone


# ---------------------------------------------------------------- at write time


def leaky_phase_one(request: ModelRequest) -> str:
    """A model that derives its answer from the secret it read: a lower-case slug, an
    upper-cased quote, a heading cut inside the secret."""
    return json.dumps(
        {
            "rollout_slug": "rotate-acme-proj-77x9-credential",
            "rollout_summary": "# Rotated ACME-PROJ-77X9\nThe key acme proj 77x9 was rotated.",
            "raw_memory": "## Rotate the ACME-PR…\n- rotated …OJ-77x9 in staging",
        }
    )


@pytest.mark.parametrize("engine", ["model", "extractive"])
async def test_a_pattern_configured_after_recording_reaches_what_phase_one_derives(
    tmp_path: Path, engine: str
) -> None:
    """A transcript recorded before the pattern was configured (or planted in sessions/)
    holds the secret; phase one's slug, summary and raw memory keep none of its forms."""
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, "a1", TASKS["a1"], EXPLICIT)  # no pattern: the transcript holds it
    assert SECRET in (tmp_path / "sessions/a1.jsonl").read_text()
    model = FunctionModel(leaky_phase_one) if engine == "model" else EXTRACTIVE
    config = MemoryGenerateConfig(
        phase_one_model=model, phase_two_model=EXTRACTIVE, redact_patterns=(("history", PATTERN),)
    )
    report = await api.generate(tmp_path, config=config)
    assert report.processed == ["a1"]
    assert leftovers(tmp_path) == []
    [summary] = (tmp_path / "memories/rollout_summaries").iterdir()
    assert "redacted" in summary.name


# ---------------------------------------------------------------- the stop-time pass


@pytest.mark.parametrize(
    ("folder", "body", "expected"),
    [
        # a default rule's key as a skill's folder, glued by a separator
        (f"deploy-{TOKEN}", "# Deploy\n", "skills/deploy-redacted/SKILL.md"),
        # a key the rules take only from a separator on (glued to a word by a hyphen)
        (f"n-{OPENAI}", "# Notes\n", "skills/n-redacted/SKILL.md"),
        (f"password={'hunter2'}", "# Reset\n", "skills/password=redacted/SKILL.md"),
        # one's own pattern: the folder is the body's secret, lower-cased
        ("acme-proj-77x9", f"# Runbook\nuse {SECRET}\n", "skills/redacted/SKILL.md"),
        # upper case, underscores
        ("ACME_PROJ_77X9_runbook", f"use {SECRET}\n", "skills/redacted_runbook/SKILL.md"),
    ],
)
async def test_a_skill_an_agent_names_after_a_secret_is_renamed_before_it_is_versioned(
    tmp_path: Path, folder: str, body: str, expected: str
) -> None:
    skill = f"memories/skills/{folder}/SKILL.md"
    cmd = f"mkdir -p memories/skills/{folder} && printf '%s' '{body}' > {skill}"
    config = MemoryGenerateConfig(
        phase_one_model=EXTRACTIVE,
        phase_two_model=EXTRACTIVE,
        schedule="explicit",
        redact_patterns=(("history", PATTERN),),
    )
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, "s1", "write a skill", config, cmd)
    assert (tmp_path / "memories" / expected).exists()
    assert not (tmp_path / skill).parent.exists()
    assert leftovers(tmp_path) == []  # the version record's names too
    on_disk = [str(p) for p in (tmp_path / "memories").rglob("*")]
    assert not any("ghp_" in p or "sk-proj" in p or "hunter2" in p for p in on_disk)
    [version] = await api.log(tmp_path)  # the run's edit, versioned under the new name
    assert expected.removeprefix("memories/") in version.changed
    for blob in (tmp_path / "memories/.history/objects").iterdir():  # history intact
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


async def test_a_title_cut_inside_the_secret_keeps_no_part_of_it(tmp_path: Path) -> None:
    """The extractive engine cuts a task's title at 100 characters: here inside the secret,
    so the heading would keep ``ACME-PR…``."""
    task = "x" * 84 + f" rotate {SECRET} now, then check the deploy."
    assert SECRET[:5] in task[:100] and SECRET not in task[:100]
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, "a1", task, EXPLICIT)
    config = MemoryGenerateConfig(
        phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE, redact_patterns=(("k", PATTERN),)
    )
    assert (await api.generate(tmp_path, config=config)).processed == ["a1"]
    raw = (tmp_path / "memories/raw_memories/a1.md").read_text()
    assert "[REDACTED:k]…" in raw  # the cut prefix, redacted where it stood
    assert leftovers(tmp_path) == []


async def test_a_skill_named_after_a_secret_in_review_mode_is_proposed_under_a_clean_name(
    tmp_path: Path,
) -> None:
    from test_history import consolidated
    from test_review import _shell_run

    await consolidated(tmp_path, ["invoice-fix"])
    folder = f"memories/skills/deploy-{TOKEN}"
    await _shell_run(tmp_path, f"mkdir -p {folder} && printf '# Deploy\\n' > {folder}/SKILL.md")
    [proposal] = await api.inbox(tmp_path)
    assert proposal.files == ["skills/deploy-redacted/SKILL.md"]
    on_disk = list((tmp_path / "memories").rglob("*"))
    assert not [
        p for p in on_disk if TOKEN in str(p) or (p.is_file() and TOKEN.encode() in p.read_bytes())
    ]
    await api.approve(tmp_path, proposal.id)
    assert (tmp_path / "memories/skills/deploy-redacted/SKILL.md").read_text() == "# Deploy\n"


@pytest.mark.parametrize(
    "folders",
    [
        [f"skills/deploy-{TOKEN}"],
        [f"skills/a/{SECRET.lower()}/b"],
        [f"notes-{TOKEN}", "skills/kept"],
    ],
    ids=["skill", "nested-own-pattern", "top-level"],
)
async def test_an_empty_folder_named_after_a_secret_is_removed_at_the_stop(
    tmp_path: Path, folders: list[str]
) -> None:
    cmd = " && ".join(f"mkdir -p memories/{f}" for f in folders)
    config = MemoryGenerateConfig(schedule="explicit", redact_patterns=(("history", PATTERN),))
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, "f1", "make folders", config, cmd)
    names = [str(p.relative_to(tmp_path)) for p in (tmp_path / "memories").rglob("*")]
    assert not [n for n in names if TOKEN in n or "acme" in n.lower()]
    assert ("memories/skills/kept" in names) == ("skills/kept" in folders)
    assert "memories/skills/a" in names or "skills/a" not in folders[0]  # a plain name stays


async def test_a_conversation_id_of_ones_own_pattern_keeps_its_files_at_write_time(
    tmp_path: Path,
) -> None:
    """Versioning and the stop-time pass never rename a conversation's files (its id is the
    key of its state): the conversation stays whole, and ``forget`` removes it."""
    rid = "deploy-acme-proj-77x9"
    config = MemoryGenerateConfig(
        phase_one_model=EXTRACTIVE, phase_two_model=EXTRACTIVE, redact_patterns=(("k", PATTERN),)
    )
    async with await UnixLocalSandboxClient().create(manifest=Manifest(root=tmp_path)) as session:
        await run(session, rid, "Deploy the staging cluster", config)
    assert (tmp_path / f"memories/raw_memories/{rid}.md").exists()
    [summary] = (tmp_path / "memories/rollout_summaries").iterdir()
    assert summary.name.startswith(f"{rid}_")
    forgot = await api.forget(tmp_path, rid)
    assert f"memories/rollout_summaries/{summary.name}" in forgot.removed
