"""Unit tests of the extractive engine's helpers: shell reading, patches, text, edits."""

from __future__ import annotations

import pytest

from sandmem.memory.extractive import _edits, _shell, _text
from sandmem.memory.extractive._facts import error_line
from sandmem.memory.extractive._groups import parse_bullets
from sandmem.memory.extractive._patches import PatchChange, patch_changes


@pytest.mark.parametrize(
    ("output", "code", "body"),
    [
        ("Exit code: 1\nWall time: 0.2 s\nOutput:\nboom\n", 1, "boom"),
        ("exit_code: 0\nhello", 0, "hello"),
        ("exit code 2\nno", 2, "no"),
        ("Process exited with code 127\nsh: x: not found", 127, "sh: x: not found"),
        ("hello world", None, "hello world"),
        ("Exit code: 0\nWall time: 0.0 s\nOutput: (none)", 0, ""),
    ],
)
def test_read_exec_output(output: str, code: int | None, body: str) -> None:
    outcome = _shell.read_exec_output(output)
    assert (outcome.exit_code, outcome.body, outcome.timed_out) == (code, body, False)


def test_read_exec_output_timeout() -> None:
    outcome = _shell.read_exec_output("Command timed out after 1000 ms and was killed.\nOutput:\nx")
    assert outcome.timed_out and outcome.exit_code is None and outcome.body == "x"


@pytest.mark.parametrize(
    ("cmd", "kind", "key"),
    [
        ("python -m pytest -q", "tests", "tests:pytest"),
        ("cd pkg && pytest tests/unit", "tests", "tests:pytest"),
        ("uv run pytest -q", "tests", "tests:pytest"),
        ("npm run test", "tests", "tests:npm run test"),
        ("ruff check src", "lint", "lint:ruff"),
        ("make deploy-site ENV=staging", "build", "build:make deploy-site"),
        ("cat pytest.ini", "inspect", "inspect:cat pytest.ini"),
        ("git status", "inspect", "inspect:git status"),
        ("python -c 'print(1)'", "run", "run:python -c"),
        ("mkdir -p out && python scripts/a.py > out/a.txt", "run", "run:python scripts/a.py"),
        ("./scripts/run.sh", "run", "run:./scripts/run.sh"),
        ("echo hi > notes.txt", "other", "other:echo hi"),
    ],
)
def test_kind_of(cmd: str, kind: str, key: str) -> None:
    assert _shell.kind_of(cmd) == (kind, key)


@pytest.mark.parametrize(
    ("cmd", "workdir", "effects"),
    [
        ("echo hi > out.txt 2>&1", None, [("written", "out.txt", "")]),
        ("python -c 'print(1 > 0)'", None, []),
        ("ls &> /dev/null", None, []),
        (
            "cd app && rm -rf build; mv a.py b.py",
            None,
            [("deleted", "app/build", ""), ("moved", "app/a.py", "app/b.py")],
        ),
        ("touch x.py", "pkg", [("created", "pkg/x.py", "")]),
        (
            "sed -i s/a/b/ f.py | tee log.txt",
            None,
            [("changed", "f.py", ""), ("written", "log.txt", "")],
        ),
        ("git mv old.py new.py", None, [("moved", "old.py", "new.py")]),
        ("cat > notes.md <<'EOF'\nit's \"unbalanced\nEOF", None, [("written", "notes.md", "")]),
        ("echo 'unbalanced", None, []),
    ],
)
def test_file_effects(cmd: str, workdir: str | None, effects: list[tuple[str, str, str]]) -> None:
    found = [(e.action, e.path, e.detail) for e in _shell.file_effects(cmd, workdir)]
    assert found == effects


def test_viewed_file_and_listed_dir() -> None:
    assert _shell.viewed_file("cat src/a.py") == "src/a.py"
    assert _shell.viewed_file("sed -n 1,40p src/a.py", "pkg") == "pkg/src/a.py"
    assert _shell.viewed_file("head -n 5 data.csv") == "data.csv"
    assert _shell.viewed_file("cat a.py b.py") is None
    assert _shell.viewed_file("cat a.py | wc -l") is None
    assert _shell.listed_dir("ls -la src") == "src"
    assert _shell.listed_dir("ls -R") is None
    long = "total 8\ndrwxr-xr-x 2 u u 4096 Jan 1 00:00 pkg\n-rw-r--r-- 1 u u 1 Jan 1 00:00 a.py\n"
    assert _shell.ls_entries(long) == ["pkg/", "a.py"]


@pytest.mark.parametrize(
    ("path", "content", "description"),
    [
        (
            "a.py",
            "import x\n\ndef f(a, b):\n    pass\n\nclass C:\n    def m(self): ...\n",
            "defines `f(a, b)`, `class C`",
        ),
        ("d.csv", "id,region,amount\n1,N,2\n", "columns `id`, `region`, `amount`"),
        ("d.csv", "1,2\n3,4\n", None),
        ("c.json", '{"name": 1, "items": []}', "keys `name`, `items`"),
        ("pyproject.toml", "[project]\nname='x'\n[tool.ruff]\n", "sections [project], [tool.ruff]"),
        ("README.md", "# Acme metrics\ntext", 'titled "Acme metrics"'),
        ("run.sh", "#!/bin/sh\n# Rebuild the index\nmake", 'described as "Rebuild the index"'),
        ("image.png", "\x89PNG", None),
    ],
)
def test_describe_content(path: str, content: str, description: str | None) -> None:
    assert _shell.describe_content(path, content) == description


def test_patch_changes_describe_the_nature_of_each_change() -> None:
    patch = (
        "*** Begin Patch\n"
        "*** Update File: src/r.py\n@@\n-    return a + b\n+    return a * b\n"
        "@@ def g():\n+    log()\n+    more()\n"
        "*** Add File: tests/test_r.py\n+def test_r():\n+    assert True\n"
        "*** Delete File: old.py\n"
        "*** Update File: x.py\n*** Move to: y.py\n@@\n-a\n-b\n-c\n+d\n"
        "*** End Patch"
    )
    assert patch_changes(patch) == [
        PatchChange(
            "changed",
            "src/r.py",
            "changed `return a + b` to `return a * b`; added `log()` (+1 lines)",
        ),
        PatchChange("created", "tests/test_r.py", "defines `test_r()`"),
        PatchChange("deleted", "old.py"),
        PatchChange("moved", "x.py", "replaced `a` (+2 lines) with `d`", "y.py"),
    ]


def test_a_malformed_patch_still_names_its_files() -> None:
    patch = "*** Begin Patch\n*** Update File: a.py\nnot a hunk line\n*** Move to: b.py\n"
    assert patch_changes(patch) == [PatchChange("moved", "a.py", "", "b.py")]


def test_error_line_prefers_the_telling_line() -> None:
    assert error_line("x\nFAILED t.py::a - assert 1 == 2\nE   boom\n") == (
        "FAILED t.py::a - assert 1 == 2"
    )
    assert error_line("Traceback\n  File x\nValueError: bad\n") == "ValueError: bad"
    assert error_line("Compiling a\nerror[E0308]: mismatched types\nerror: could not") == (
        "error[E0308]: mismatched types"
    )
    assert error_line("warning\nmake: *** [Makefile:3: all] Error 1\n") == (
        "make: *** [Makefile:3: all] Error 1"
    )
    assert error_line("just text\nlast line") == "last line"
    assert error_line("") == ""


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        (
            "Inspect the workspace and fix the invoice total bug in src/acme_metrics/report.py.",
            "inspect-workspace-fix-invoice-total-bug-acme_metrics-report",
        ),
        ("Ünïcödé façade — fix it", "unicode-facade-fix"),
        ("¿¡!?", "rollout"),
        ("_private _names", "private-names"),
        ("x" * 200, "x" * 60),
    ],
)
def test_slugify(text: str, slug: str) -> None:
    assert _text.slugify(text) == slug


def test_sentences_and_paths() -> None:
    assert _text.sentences("Fix it. Always run ruff!\n- never push\nUse v1.2 now") == [
        "Fix it.",
        "Always run ruff!",
        "never push",
        "Use v1.2 now",
    ]
    assert _text.find_paths(
        "see src/a.py:3, tests/t_a.py::test_x, https://x.io/b.py, /usr/lib/c.py and ./d.md"
    ) == ["src/a.py", "tests/t_a.py", "d.md"]


def test_fit_sections_never_cuts_a_line() -> None:
    sections = [
        _text.Section("A", [f"- a{i} " + "x" * 50 for i in range(20)]),
        _text.Section("B", ["- keep me"]),
    ]
    text = _text.fit_sections("# T\n", sections, 400, [0, 1])
    assert len(text.encode()) <= 400
    assert "- keep me" in text
    assert "more omitted" in text
    assert all(
        line in ("# T", "", "## A", "## B", "- keep me") or line.startswith("- ")
        for line in text.splitlines()
    )
    assert _text.cut_lines("ab\ncd\nef\n", 6) == "ab\ncd\n"


def test_parse_bullets_reads_labels_citations_and_wrapped_lines() -> None:
    title, bullets = parse_bullets(
        "rollout_id: r\nupdated_at: x\n\n## Title\n"
        "- Works: `make` (build) (rollout r)\n"
        "* The user prefers tabs (rollout r)\n"
        "- a long note\n  that wraps (rollouts r, s)\n"
        "loose line\n"
    )
    assert title == "Title"
    assert [(b.kind, b.text) for b in bullets] == [
        ("works", "Works: `make` (build)"),
        ("preference", "The user prefers tabs"),
        ("note", "a long note that wraps"),
        ("note", "loose line"),
    ]


def test_manual_notes_diff() -> None:
    before = "# Memory\n\n## G\nKeywords: a\nLearnings:\n- one (rollout r)\n- two (rollout r)\n"
    after = before.replace("- two (rollout r)\n", "- my note\n") + "\n## Mine\nhello\n"
    notes = _edits.manual_notes(after, before)
    assert notes.grouped == {"G": ["- my note"], "Mine": ["hello"]}
    assert notes.deleted == {"two"}
    notes.place({"G"})
    assert notes.loose == ["### Mine", "hello"]
    assert _edits.deletion_key("- use --verbose (rollout r)") == "use - -verbose"
