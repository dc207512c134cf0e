"""Issue 39, the first hour round 2: each numbered trap as a test (the interactive ones, the
start lines and Ctrl-C of long-running commands, are in ``test_long_running.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_workspaces import invoke, invoke_json
from test_first_hour import error_lines, pending_conversation

from sandmem.cli._models import choose_models

# ---------------------------------------------------------------- 3: an offline memory engine

OFFLINE_WAYS = {
    "--model": (["--model", "extractive"], {}, None),
    "--memory-model": (["--memory-model", "extractive"], {}, None),
    "env": ([], {"SANDMEM_MEMORY_MODEL": "extractive"}, None),
    "sandmem.toml": ([], {}, '[memory]\nmodel = "extractive"\n'),
}


@pytest.mark.parametrize("way", list(OFFLINE_WAYS))
def test_memory_generates_offline_by_each_setting(tmp_path: Path, way: str) -> None:
    flags, env, settings = OFFLINE_WAYS[way]
    pending_conversation(tmp_path, "a")
    if settings is not None:
        (tmp_path / "sandmem.toml").write_text(settings)
    result = invoke("memory", "generate", "-w", tmp_path, *flags, env=env)
    assert result.exit_code == 0, result.stderr
    assert "✓ a: extracted" in result.stdout
    assert (tmp_path / "memories" / "MEMORY.md").read_text().strip()


def test_without_any_setting_the_error_names_every_offline_way(tmp_path: Path) -> None:
    pending_conversation(tmp_path, "a")
    result = invoke("memory", "generate", "-w", tmp_path)
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    for way in ("--model extractive", "SANDMEM_MEMORY_MODEL=extractive", "sandmem.toml"):
        assert way in line


def test_the_flag_and_the_environment_come_before_the_workspace_setting(tmp_path: Path) -> None:
    (tmp_path / "sandmem.toml").write_text('[memory]\nmodel = "extractive"\n')
    assert choose_models("m", None, "model", tmp_path).memory == "extractive"
    assert choose_models("m", None, "model", tmp_path).memory_source == "sandmem.toml"
    assert choose_models("m", "other", "model", tmp_path).memory == "other"
    os.environ["SANDMEM_MEMORY_MODEL"] = "from-env"
    try:
        assert choose_models("m", None, "model", tmp_path).memory == "from-env"
    finally:
        del os.environ["SANDMEM_MEMORY_MODEL"]
    assert choose_models("scripted", "extractive", "model", tmp_path).memory == "extractive"


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[memory\nmodel=", "not valid TOML"),
        ("[memory]\nmodel = 3\n", "[memory] model must be"),
        ("[memory]\nmodel = '  '\n", "[memory] model must be"),
        (b"\xff\xfe[memory]", "not valid TOML"),
        ("# " + "x" * 70_000, "larger than 64 KiB"),
    ],
)
def test_a_bad_workspace_setting_is_one_error_line(
    tmp_path: Path, content: str | bytes, says: str
) -> None:
    target = tmp_path / "sandmem.toml"
    if isinstance(content, bytes):
        target.write_bytes(content)
    else:
        target.write_text(content)
    result = invoke("memory", "generate", "-w", tmp_path)
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert says in line


def test_a_linked_or_special_workspace_setting_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text('[memory]\nmodel = "extractive"\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "sandmem.toml").symlink_to(elsewhere)
    result = invoke("memory", "generate", "-w", ws)
    assert result.exit_code == 2 and "cannot read" in result.stderr
    (ws / "sandmem.toml").unlink()
    os.mkfifo(ws / "sandmem.toml")
    result = invoke("memory", "generate", "-w", ws)
    assert result.exit_code == 2 and "not a regular file" in result.stderr


def test_forget_dry_run_says_what_the_real_run_needs(workspace: Path) -> None:
    dry = invoke("memory", "forget", "-w", workspace, "invoice-fix", "--dry-run")
    assert dry.exit_code == 0, dry.stderr
    assert "  (the real run needs a model: no model server" in dry.stdout
    assert "--model extractive" in dry.stdout
    offline = invoke(
        "memory", "forget", "-w", workspace, "invoice-fix", "--dry-run", "-m", "extractive"
    )
    assert "  (with the extractive engine (no model))" in offline.stdout
    real = invoke("memory", "forget", "-w", workspace, "invoice-fix", "--yes", "-m", "extractive")
    assert real.exit_code == 0, real.stderr
    assert not (workspace / "sessions" / "invoice-fix.jsonl").exists()


# ---------------------------------------------------------------- 6: ingest errors


def test_ingest_of_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "gone.jsonl")
    (tmp_path / "ws").mkdir()
    for missing, says in (("nope.jsonl", "no such file"), ("link.jsonl", "a broken link")):
        result = invoke("memory", "ingest", "-w", tmp_path / "ws", tmp_path / missing)
        assert result.exit_code == 2, result.output
        [line] = error_lines(result.stderr)
        assert str(tmp_path / missing) in line and says in line
    assert not any((tmp_path / "ws").iterdir())  # nothing made by a command that did not start


def test_ingest_says_why_a_file_was_not_read(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    (tmp_path / "notes.json").write_text("{ not json at all")
    result = invoke(
        "memory",
        "ingest",
        "-w",
        tmp_path / "ws",
        tmp_path / "pipe.jsonl",
        tmp_path / "pyproject.toml",
        tmp_path / "notes.json",
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "pipe.jsonl: skipped: not a regular file (a device, FIFO or socket)" in out
    assert "pyproject.toml: skipped: not a transcript: not JSON" in out
    assert "notes.json: skipped: not a transcript: not JSON" in out
    assert "JSONDecodeError" not in out + result.stderr


def test_a_wrong_format_says_every_line_was_dropped(tmp_path: Path) -> None:
    from ingest_fixtures import claude_session_one, codex_session_one

    (tmp_path / "ws").mkdir()
    claude = claude_session_one(tmp_path / "claude")
    codex = codex_session_one(tmp_path / "codex")
    for wrong, source in (("codex", claude.path), ("claude-code", codex.path)):
        result = invoke("memory", "ingest", "-w", tmp_path / "ws", "--format", wrong, source)
        assert result.exit_code == 0, result.output
        assert f"nothing recorded: every new line was dropped — is it really {wrong}?" in (
            result.stdout
        )
        assert "nothing new" not in result.stdout
    right = invoke("memory", "ingest", "-w", tmp_path / "ws", claude.path)
    assert "1 segment" in right.stdout or "segment(s)," in right.stdout
    again = invoke("memory", "ingest", "-w", tmp_path / "ws", claude.path)
    assert ": nothing new" in again.stdout  # nothing appended: no drop, no warning


# ---------------------------------------------------------------- 2: offline run and chat


@pytest.mark.parametrize("command", [["run", "hello"], ["chat"]])
def test_without_a_key_the_error_points_at_the_offline_agent(
    tmp_path: Path, command: list[str]
) -> None:
    result = invoke(command[0], "-w", tmp_path, *command[1:])
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert "no model server configured" in line and "--model scripted" in line


def _files(workspace: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workspace)): p.read_bytes()
        for p in workspace.rglob("*")
        if p.is_file() and ".index" not in p.name and ".lock" not in p.name
    }


def test_the_scripted_agent_reads_memory_and_records_nothing(workspace: Path) -> None:
    before = _files(workspace)
    result = invoke("run", "-w", workspace, "--model", "scripted", "fix the invoice total bug")
    assert result.exit_code == 0, result.stderr
    # it searched memory the way the memory prompt tells a model to
    assert (
        "→ exec_command: grep -n -i -E 'fix|invoice|total|bug' memories/MEMORY.md" in result.stderr
    )
    assert "Memory: " in result.stdout and "line(s) of memories/MEMORY.md match" in result.stdout
    assert "invoice" in result.stdout.split("Memory: ", 1)[1].lower()
    # no endpoint it never contacts, no memory model it never uses
    start = result.stderr.splitlines()[0]
    assert "API at" not in start and "openai.com" not in start and "extractive" not in start
    assert "its runs are not recorded" in start
    # nothing recorded, nothing generated: memory is byte for byte what it was
    assert _files(workspace) == before


def test_the_scripted_agent_on_a_workspace_without_memory(tmp_path: Path) -> None:
    result = invoke(
        "run", "-w", tmp_path, "--model", "scripted", "which bug did you fix last time?"
    )
    assert result.exit_code == 0, result.stderr
    assert "Memory: none shown to this run" in result.stdout
    assert not any(tmp_path.iterdir())  # no junk memory entry, no layout


@pytest.mark.parametrize(
    ("task", "words"),
    [
        ("which bug did you fix last time?", ["bug", "fix"]),
        ("Fix the INVOICE total; rm -rf / `x` $(y)", ["fix", "invoice", "total"]),
        ("add a regression test for format_invoice_total", ["add", "regression", "test"]),
        ("a b c ?? !!", []),
    ],
)
def test_scripted_keywords_are_plain_words(task: str, words: list[str]) -> None:
    from sandmem.cli._scripted import keywords

    found = keywords(task)
    assert found[: len(words)] == words
    assert all(w.isalnum() and w.islower() for w in found)  # safe inside '...' in a shell


# ---------------------------------------------------------------- 9: make demo offline

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "mode"),
    [
        ([], "--offline"),
        (["OFFLINE=1"], "--offline"),
        (["ONLINE=1"], "--online"),
        (["MODEL=qwen3:8b"], "--model 'qwen3:8b'"),
        (["MODEL=x", "OFFLINE=1"], "--offline --model 'x'"),  # the demo refuses the mix
    ],
)
def test_make_demo_is_offline_unless_asked(args: list[str], mode: str) -> None:
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("no make")
    env = {**os.environ, "OPENAI_API_KEY": "sk-an-unrelated-key"}  # must not switch it online
    done = subprocess.run(
        ["make", "-s", "-n", "-o", ".venv/.installed", "demo", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    [command] = done.stdout.splitlines()
    assert command.startswith(f".venv/bin/sandmem demo {mode} --keep ")


def test_a_demo_on_an_unreachable_server_says_how_to_run_it_offline(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    result = invoke("demo", "--keep", tmp_path / "demo", env={"OPENAI_BASE_URL": url})
    assert result.exit_code == 1
    [line] = error_lines(result.stderr)
    assert "cannot reach the model server" in line
    assert "run the demo offline: make demo OFFLINE=1 (sandmem demo --offline)" in line
    assert not (tmp_path / "demo").exists() or not any((tmp_path / "demo").iterdir())
    without = invoke("demo", "--model", "m", "--keep", tmp_path / "d2")
    assert without.exit_code != 0
    assert "run the demo offline" in without.stderr


# ---------------------------------------------------------------- 7: one project's sessions


def _codex_home(tmp_path: Path, ws: Path) -> tuple[Path, str, str, str]:
    """A Codex home with three sessions: one in the workspace (a subdirectory of it), one in
    /home/dev/shop, one in /srv/docs."""
    from ingest_fixtures import codex_session_one, codex_session_two

    home = tmp_path / "codex-home"
    ours = codex_session_one(home / "sessions" / "a")
    text = ours.path.read_text().replace("/home/dev/shop", str(ws / "pkg"))
    ours.path.write_text(text)
    shop = codex_session_one(home / "sessions" / "b")  # the same id: give it another
    shop.path.write_text(shop.path.read_text().replace(ours.session_id, SHOP_ID))
    docs = codex_session_two(home / "sessions" / "c")
    return home, ours.session_id, SHOP_ID, docs.session_id


SHOP_ID = "0199ffff-0000-7000-8000-00000000beef"


def _recorded(ws: Path) -> set[str]:
    return {p.stem for p in (ws / "sessions").glob("*.jsonl")}


def test_codex_home_is_filtered_by_the_workspace_by_default(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home, ours, _shop, _docs = _codex_home(tmp_path, ws)
    env = {"CODEX_HOME": str(home)}
    result = invoke("memory", "ingest", "-w", ws, home / "sessions", env=env)
    assert result.exit_code == 0, result.stderr
    assert f"only sessions whose working directory is in {ws}" in result.stderr
    assert "2 session(s) of other projects left out" in result.stdout
    assert _recorded(ws) == {f"codex-{ours}"}
    data = invoke_json("memory", "ingest", "-w", ws, home / "sessions", "--json", env=env)
    left = [s for s in data["sources"] if s["status"] == "skipped"]
    assert len(left) == 2 and all(s["error"].startswith("another project:") for s in left)


@pytest.mark.parametrize(
    ("flags", "wanted"),
    [
        (["--cwd", "/home/dev/shop"], {"shop"}),
        (["--project", "/srv"], {"docs"}),
        (["--all-projects"], {"ours", "shop", "docs"}),
    ],
)
def test_cwd_project_and_all_projects(tmp_path: Path, flags: list[str], wanted: set[str]) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home, ours, shop, docs = _codex_home(tmp_path, ws)
    ids = {"ours": ours, "shop": shop, "docs": docs}
    env = {"CODEX_HOME": str(home)}
    result = invoke("memory", "ingest", "-w", ws, home / "sessions", *flags, env=env)
    assert result.exit_code == 0, result.stderr
    assert "only sessions whose working directory" not in result.stderr
    assert _recorded(ws) == {f"codex-{ids[w]}" for w in wanted}


def test_transcripts_outside_the_agent_homes_are_not_filtered(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    home, *_ids = _codex_home(tmp_path, ws)
    result = invoke("memory", "ingest", "-w", ws, home / "sessions")  # CODEX_HOME elsewhere
    assert result.exit_code == 0, result.stderr
    assert len(_recorded(ws)) == 3
    both = invoke("memory", "ingest", "-w", ws, home, "--cwd", "/x", "--all-projects")
    assert both.exit_code == 2 and "not both" in both.stderr


def test_claude_home_is_filtered_too(tmp_path: Path) -> None:
    from ingest_fixtures import claude_session_one

    ws = tmp_path / "ws"
    ws.mkdir()
    home = tmp_path / "claude-home"
    claude_session_one(home / "projects")  # its cwd is /home/ana/webapp
    env = {"CLAUDE_CONFIG_DIR": str(home)}
    result = invoke("memory", "ingest", "-w", ws, home / "projects", env=env)
    assert "1 session(s) of other projects left out" in result.stdout
    assert _recorded(ws) == set()
    mine = invoke("memory", "ingest", "-w", ws, home / "projects", "--cwd", "/home/ana", env=env)
    assert mine.exit_code == 0 and len(_recorded(ws)) == 1


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("/home/dev/shop", True),
        ("/home/dev/shop/sub/dir", True),
        ("/home/dev/shop/../shop/x", True),
        ("/home/dev/shop2", False),
        ("/home/dev", False),
        ("relative/shop", False),
        ("", False),
        (None, False),
        ("/home/dev/shop/../../etc", False),
    ],
)
def test_in_directory(path: str | None, inside: bool) -> None:
    from sandmem.memory.ingestion._ingest import in_directory

    assert in_directory(path, "/home/dev/shop") is inside


# ---------------------------------------------------------------- 12: the smaller ones


def test_view_help_says_the_page_size_the_code_uses() -> None:
    from sandmem.memory.views._viewer import PAGE_SIZE

    text = " ".join(invoke("memory", "view", "--help").stdout.split())
    assert f"Over {PAGE_SIZE} conversations it shows the newest {PAGE_SIZE}" in text


@pytest.mark.parametrize("command", ["tree", "list", "status", "log"])
def test_a_workspace_given_as_an_argument_gets_a_hint(
    tmp_path: Path, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path)
    result = invoke("memory", command, "ws")
    assert result.exit_code == 2
    [line] = error_lines(result.stderr)
    assert line.endswith("; to name the workspace, use -w ws")
    not_a_dir = invoke("memory", command, "no-such-dir")
    assert "use -w" not in not_a_dir.stderr


def test_the_no_memory_error_speaks_to_cli_users(tmp_path: Path) -> None:
    result = invoke("memory", "tree", "-w", tmp_path)
    assert result.exit_code == 1
    [line] = error_lines(result.stderr)
    assert "--memories-dir / --sessions-dir" in line and "MemoryLayoutConfig(" not in line


def test_the_viewer_lists_newest_first_and_the_real_summary_size(workspace: Path) -> None:
    from sandmem._log_lines import human_size

    page = workspace.parent / "view.html"
    assert invoke("memory", "view", "-w", workspace, "--out", page).exit_code == 0
    html = page.read_text()
    assert html.index(">deploy-notes<") < html.index(">invoice-fix<")  # as `memory list`
    listed = [c["rollout_id"] for c in invoke_json("memory", "list", "-w", workspace, "--json")]
    assert listed == ["deploy-notes", "invoice-fix"]
    size = (workspace / "memories" / "memory_summary.md").stat().st_size
    # the size on disk, in the CLI's form (tests/cli/test_file_sizes_agree.py: every surface)
    assert f"memory_summary.md, {human_size(size)}" in html
    tree = invoke_json("memory", "tree", "-w", workspace, "--json")
    sizes = {f["path"]: f["bytes"] for f in tree["files"]}
    assert sizes["memories/memory_summary.md"] == size
