"""Reading shell commands and their outputs: exit codes, what kind of command it was, a key to
recognise a rerun of "the same" command, the files a command changed, and a one-line
description of what a file holds."""

from __future__ import annotations

import functools
import json
import posixpath
import re
import shlex
from dataclasses import dataclass

_EXIT = re.compile(
    r"^\s*(?:exit[_ ]?code|exit status|process exited with code)\s*[:=]?\s*(-?\d+)\b", re.I
)
_TIMED_OUT = re.compile(r"^\s*command timed out\b", re.I)
_STATUS_LINE = re.compile(r"^\s*(?:wall time:|note: the command printed|duration:)", re.I)
_OUTPUT_LINE = re.compile(r"^\s*output:\s*(?:\(none\))?\s*$", re.I)

_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "tests",
        re.compile(
            r"\b(?P<tool>pytest|py\.test|unittest|nose2|tox|nox|jest|vitest|ctest|phpunit|rspec|"
            r"(?:npm|pnpm|yarn|bun)(?: run)? test|go test|cargo test|make (?:test|check)|"
            r"(?:mvn|gradlew?|\./gradlew) test)\b"
        ),
    ),
    (
        "lint",
        re.compile(
            r"\b(?P<tool>ruff|mypy|flake8|pylint|black|isort|eslint|prettier|tsc|pyright|"
            r"cargo clippy|golangci-lint|shellcheck)\b"
        ),
    ),
    (
        "build",
        re.compile(
            r"\b(?P<tool>make(?: (?!-)[\w./-]+(?![\w=]))?|cmake|ninja|cargo build|go build|"
            r"(?:npm|pnpm|yarn) (?:ci|install|run build)|pip3? install|"
            r"uv (?:sync|pip install|add)|poetry install|docker build|"
            r"mvn|gradlew?)\b"
        ),
    ),
)
_INSPECT = frozenset(
    "cat head tail less more ls find grep rg sed awk wc pwd env printenv echo tree which file "
    "stat du df nl diff cd git".split()
)
_GIT_CHANGES = frozenset({"add", "commit", "mv", "rm", "checkout", "reset", "restore", "apply"})
_RUNNERS = frozenset(
    {"python", "python3", "node", "ruby", "bash", "sh", "deno", "bun", "Rscript", "go"}
)
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>"})
_WRAPPERS = frozenset({"sudo", "time", "nohup", "exec", "command", "env"})
_SETUP = frozenset({"mkdir", "cd", "export", "source", ".", "chmod", "set", "touch"})
_CONTENT_VIEWERS = frozenset({"cat", "head", "tail", "nl", "sed", "less", "more"})


@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int | None
    timed_out: bool
    body: str


def read_exec_output(text: str) -> ExecOutcome:
    """The exit code (from an ``Exit code: N`` / ``exit_code: N`` / ``exit code N`` line among
    the first lines), whether it timed out, and the output without those status lines."""
    lines = text.split("\n")
    exit_code: int | None = None
    timed_out = False
    start = 0
    for index, line in enumerate(lines[:5]):
        match = _EXIT.match(line)
        if match:
            exit_code, start = int(match.group(1)), index + 1
        elif _TIMED_OUT.match(line):
            timed_out, start = True, index + 1
        elif _STATUS_LINE.match(line):
            start = index + 1
        elif _OUTPUT_LINE.match(line):
            start = index + 1
            break
        elif line.strip() and exit_code is None and not timed_out:
            break
    return ExecOutcome(exit_code, timed_out, "\n".join(lines[start:]).strip("\n"))


def tokens(cmd: str) -> list[str] | None:
    """Shell tokens of ``cmd`` (operators as their own tokens); a heredoc body is left out;
    ``None`` when the command cannot be tokenised (unbalanced quotes)."""
    found = _tokens(cmd)
    return None if found is None else list(found)


@functools.lru_cache(maxsize=256)
def _tokens(cmd: str) -> tuple[str, ...] | None:
    """``tokens``, remembered: one step's command is read by several rules."""
    lines = cmd.split("\n")
    heredoc = next((i for i, line in enumerate(lines) if "<<" in line), None)
    if heredoc is not None:
        lines = lines[: heredoc + 1]
    lexer = shlex.shlex(" ; ".join(lines), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        return tuple(lexer)
    except ValueError:
        return None


def simple_commands(cmd: str) -> list[list[str]]:
    """The simple commands of ``cmd``: token lists split at ``&&``, ``||``, ``;``, ``|``."""
    toks = tokens(cmd)
    if toks is None:
        return []
    out: list[list[str]] = [[]]
    for tok in toks:
        if tok in _SEPARATORS:
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def _core(words: list[str]) -> list[str]:
    """A simple command without leading ``VAR=value`` assignments and wrappers like ``sudo``."""
    i = 0
    while i < len(words) and (
        re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i]) or words[i] in _WRAPPERS
    ):
        i += 1
    return words[i:]


def kind_of(cmd: str) -> tuple[str, str]:
    """``(kind, key)``: kind is ``tests``, ``lint``, ``build``, ``run``, ``inspect`` or
    ``other``; two commands with the same key are reruns of the same thing (``pytest -q`` and
    ``python -m pytest tests/`` share the key ``tests:pytest``)."""
    first = cmd.split("\n", 1)[0]
    commands = [_core(c) for c in simple_commands(cmd)]
    commands = [c for c in commands if c and c[0] != "cd"]
    if commands and all(_is_inspection(c) for c in commands):
        return "inspect", "inspect:" + " ".join(commands[0][:2])
    for kind, pattern in _KINDS:
        match = pattern.search(first)
        if match:
            return kind, f"{kind}:{match.group('tool')}"
    if not commands:
        return "other", "other:" + " ".join(first.split()[:2])
    main = next((c for c in commands if c[0] not in _SETUP), commands[0])
    name = posixpath.basename(main[0])
    if main[0].startswith("./") or name.endswith((".sh", ".py")):
        return "run", f"run:{main[0]}"
    if name in _RUNNERS or name.startswith("python"):
        if len(main) > 1 and main[1] in ("-c", "-e"):
            return "run", f"run:{name} {main[1]}"
        target = next((w for w in main[1:] if not w.startswith("-")), "")
        return "run", f"run:{name} {target}".rstrip()
    return "other", "other:" + " ".join(main[:2])


def _is_inspection(words: list[str]) -> bool:
    name = posixpath.basename(words[0])
    if name == "git":
        return len(words) > 1 and words[1] not in _GIT_CHANGES
    if name == "sed":
        return not any(w.startswith("-i") for w in words[1:])
    return name in _INSPECT and not any(w in _REDIRECTS for w in words)


# --------------------------------------------------------------------- file effects


@dataclass(frozen=True)
class FileEffect:
    action: str  # created, written, changed, deleted, moved, copied
    path: str
    detail: str = ""


def _join(cwd: str, path: str) -> str:
    if path.startswith("/") or cwd in ("", "."):
        return posixpath.normpath(path)
    return posixpath.normpath(posixpath.join(cwd, path))


def file_effects(cmd: str, workdir: str | None = None) -> list[FileEffect]:
    """Files a successful command created, wrote, changed, moved, copied or deleted: output
    redirections, ``tee``, ``touch``, ``mkdir``, ``rm``, ``mv``, ``cp``, ``sed -i``,
    ``git mv``/``git rm``; a ``cd dir`` before them is followed."""
    cwd = workdir or "."
    effects: list[FileEffect] = []
    for words in simple_commands(cmd):
        words = _core(words)
        args: list[str] = []
        i = 0
        while i < len(words):
            if words[i] in _REDIRECTS and i + 1 < len(words):
                target = words[i + 1]
                if not target.startswith(("&", "/dev/")):
                    effects.append(FileEffect("written", _join(cwd, target)))
                i += 2
                continue
            if words[i] in ("<", "<<", "<<<", ">&", "<&"):
                i += 2
                continue
            args.append(words[i])
            i += 1
        if not args:
            continue
        if args[0] == "cd" and len(args) > 1:
            cwd = _join(cwd, args[1])
            continue
        effects.extend(_command_effects(args, cwd))
    return [e for e in effects if e.path not in ("", ".")]


def _command_effects(args: list[str], cwd: str) -> list[FileEffect]:
    name = posixpath.basename(args[0])
    if name == "git" and len(args) > 1 and args[1] in ("mv", "rm"):
        name, args = args[1], args[1:]
    operands = [_join(cwd, a) for a in args[1:] if not a.startswith("-")]
    if name in ("rm", "unlink", "rmdir"):
        return [FileEffect("deleted", p) for p in operands]
    if name in ("touch", "mkdir"):
        what = "directory" if name == "mkdir" else ""
        return [FileEffect("created", p, what) for p in operands]
    if name == "tee":
        return [FileEffect("written", p) for p in operands]
    if name in ("mv", "cp", "install") and len(operands) >= 2:
        action = "moved" if name == "mv" else "copied"
        dest = operands[-1]
        return [FileEffect(action, src, dest) for src in operands[:-1]]
    if name in ("sed", "perl") and any(a.startswith(("-i", "-pi")) for a in args[1:]):
        return [FileEffect("changed", operands[-1])] if operands else []
    return _other_effects(name, args, operands, cwd)


def _other_effects(name: str, args: list[str], operands: list[str], cwd: str) -> list[FileEffect]:
    """``git checkout/restore -- files``, ``dd of=``, ``chmod``/``chown`` (the files after the
    mode), ``truncate``, ``ln``, ``awk -i inplace``."""
    if name == "git" and len(args) > 1 and args[1] in ("checkout", "restore") and "--" in args:
        return [FileEffect("changed", _join(cwd, a), "restored") for a in _after_dashes(args)]
    if name == "dd":
        return [FileEffect("written", _join(cwd, a[3:])) for a in args[1:] if a.startswith("of=")]
    if name in ("chmod", "chown") and len(operands) >= 2:
        return [FileEffect("changed", p, f"{name} {args[1]}") for p in operands[1:]]
    if name == "truncate":
        size = args[args.index("-s") + 1] if "-s" in args[:-1] else None
        return [FileEffect("changed", p) for p in operands if size is None or p != _join(cwd, size)]
    if name == "ln" and operands:
        return [FileEffect("created", operands[-1], "link")]
    if name == "awk" and "inplace" in args and operands:
        return [FileEffect("changed", operands[-1])]
    return []


def _after_dashes(args: list[str]) -> list[str]:
    return args[args.index("--") + 1 :]


#: commands that change files without naming them: patches, git operations that rewrite the
#: working tree, formatters and linters asked to fix
_GIT_REWRITES = frozenset(
    "apply am checkout switch restore reset stash pull merge rebase cherry-pick revert".split()
)
_FIX_FLAGS = frozenset({"--fix", "--write", "-w", "--in-place", "-i", "--inplace", "--apply"})
_FORMATTERS = frozenset({"black", "isort", "autopep8", "autoflake", "gofmt", "goimports"})
_CHECK_ONLY = frozenset({"--check", "--diff", "--check-only", "-l", "--list-different"})


def edits_files(cmd: str) -> bool:
    """Whether a command changes files in ways :func:`file_effects` cannot name: ``patch``,
    ``git apply`` / ``checkout`` / ``reset`` / ``stash`` / ``pull`` / ..., a formatter
    (``black``, ``ruff format``, ``cargo fmt``, ``gofmt -w``, ...) or a linter asked to fix
    (``--fix``, ``--write``)."""
    for words in simple_commands(cmd):
        words = _core(words)
        if not words:
            continue
        name = posixpath.basename(words[0])
        rest = words[1:]
        if name == "patch" or (name == "git" and rest[:1] and rest[0] in _GIT_REWRITES):
            return True
        if _CHECK_ONLY & set(rest):
            continue
        if name in _FORMATTERS or (name == "ruff" and "format" in rest[:2]):
            return True
        if name in ("cargo", "go") and rest[:1] in (["fmt"], ["fix"]):
            return True
        if _FIX_FLAGS & set(rest) and name not in ("sed", "perl", "grep", "rg", "ls"):
            return True
    return False


def viewed_file(cmd: str, workdir: str | None = None) -> str | None:
    """The file whose content a ``cat``/``head``/``tail``/``nl``/``sed -n`` command printed
    (a single simple command naming exactly one file), else ``None``."""
    commands = simple_commands(cmd)
    if len(commands) != 1:
        return None
    words = _core(commands[0])
    if not words or posixpath.basename(words[0]) not in _CONTENT_VIEWERS:
        return None
    if any(w in _REDIRECTS for w in words):
        return None
    operands = [w for w in words[1:] if not w.startswith("-") and not w.isdigit()]
    if words[0] == "sed":
        operands = operands[1:]  # the script
    if len(operands) != 1 or any(c in operands[0] for c in "*?$"):
        return None
    return _join(workdir or ".", operands[0])


def listed_dir(cmd: str, workdir: str | None = None) -> str | None:
    """The directory an ``ls`` command listed (one operand or none; not recursive)."""
    commands = simple_commands(cmd)
    if len(commands) != 1:
        return None
    words = _core(commands[0])
    if not words or words[0] != "ls" or any(w.startswith("-") and "R" in w for w in words):
        return None
    operands = [w for w in words[1:] if not w.startswith("-")]
    if len(operands) > 1 or any(c in "".join(operands) for c in "*?$"):
        return None
    return _join(workdir or ".", operands[0] if operands else ".")


_LS_LONG = re.compile(r"^[dl-][rwxsStT-]{9}[.@+]?\s")


def ls_entries(body: str) -> list[str]:
    """Names in ``ls`` output (plain or ``-l``), ``.``/``..`` and ``total N`` left out;
    directories (from ``-l``/``-F``) end with ``/``."""
    names: list[str] = []
    for line in body.splitlines():
        line = line.rstrip()
        if not line or line.startswith("total "):
            continue
        if _LS_LONG.match(line):
            name = line.split()[-1]
            names.append(name + "/" if line.startswith("d") else name)
        else:
            names.extend(line.split())
    return [n for n in names if n not in (".", "..", "./", "../")]


# --------------------------------------------------------------------- file contents

_PY_DEF = re.compile(r"^(?:async\s+)?def\s+(\w+)\s*\(([^)]*)\)|^class\s+(\w+)", re.M)
_JS_DEF = re.compile(
    r"^(?:export\s+(?:default\s+)?)?(?:async\s+)?(?:function\s*\*?\s*(\w+)|class\s+(\w+)|"
    r"const\s+(\w+)\s*=)",
    re.M,
)
_NUMBER = re.compile(r"^[-+]?[\d.,]+%?$")
_TOML_SECTION = re.compile(r"^\s*\[+([^\]\n]+)\]+\s*$", re.M)
_MD_TITLE = re.compile(r"^\s*#{1,3}\s+(.+?)\s*$", re.M)


def describe_content(path: str, content: str) -> str | None:
    """A short description of what a file holds, from its text (``None`` when unclear)."""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path.rsplit("/", 1)[-1] else ""
    if ext in ("py", "pyi"):
        return _describe_python(content)
    if ext in ("js", "jsx", "ts", "tsx", "mjs"):
        names = [next(g for g in m.groups() if g) for m in _JS_DEF.finditer(content)]
        return _defines(names)
    if ext in ("csv", "tsv"):
        return _describe_table(content, "\t" if ext == "tsv" else ",")
    if ext == "json":
        return _describe_json(content)
    if ext in ("toml", "ini", "cfg"):
        sections = list(dict.fromkeys(s.strip() for s in _TOML_SECTION.findall(content)))
        if sections:
            return "sections " + ", ".join(f"[{s}]" for s in sections[:6])
        return None
    if ext in ("sh", "bash"):
        comment = next(
            (
                line.lstrip("# ").strip()
                for line in content.splitlines()
                if line.startswith("#") and not line.startswith("#!") and line.strip("# ")
            ),
            "",
        )
        return f'described as "{comment[:100]}"' if comment else None
    if ext in ("md", "rst", "txt"):
        title = _MD_TITLE.search(content)
        return f'titled "{title.group(1)[:80]}"' if title else None
    return None


def _describe_python(content: str) -> str | None:
    names = []
    for match in _PY_DEF.finditer(content):
        if match.group(1):
            params = " ".join(match.group(2).split())
            params = params if len(params) <= 60 else params[:59] + "…"
            names.append(f"{match.group(1)}({params})")
        else:
            names.append(f"class {match.group(3)}")
    return _defines(names)


def _defines(names: list[str]) -> str | None:
    names = list(dict.fromkeys(names))
    if not names:
        return None
    shown = ", ".join(f"`{n}`" for n in names[:4])
    more = f" and {len(names) - 4} more" if len(names) > 4 else ""
    return f"defines {shown}{more}"


def _describe_table(content: str, sep: str) -> str | None:
    header = next((line for line in content.splitlines() if line.strip()), "")
    columns = [c.strip().strip('"') for c in header.split(sep)]
    if len(columns) < 2 or not all(columns) or any(_NUMBER.match(c) for c in columns):
        return None  # no header row

    shown = ", ".join(f"`{c[:40]}`" for c in columns[:10])
    more = f" and {len(columns) - 10} more" if len(columns) > 10 else ""
    return f"columns {shown}{more}"


def _describe_json(content: str) -> str | None:
    try:
        value = json.loads(content)
    except ValueError:
        return None
    if isinstance(value, dict) and value:
        keys = [str(k) for k in value][:8]
        return "keys " + ", ".join(f"`{k[:40]}`" for k in keys)
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    return None
