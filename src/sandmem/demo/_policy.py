"""The offline demo's agent: a deterministic scripted policy, not a language model.

It reads each request the way a model would (the task, its instructions with the memory
prompt, the conversation so far, the outputs of its own tool calls) and decides the next tool
call from them, so every action is real: the shell really runs pytest, the patches really edit
the files. It knows two tasks only: fixing the invoice total bug, and adding a regression test
for it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from sandmem._items import Item, item_kind, message_text
from sandmem.demo._workspace import BUGGY_FILE, python_command
from sandmem.models import ModelRequest
from sandmem.testing import FunctionModel, tool_call

_BUGGY_EXPR = "subtotal + tax_rate"
_FIXED_EXPR = "subtotal * (1 + tax_rate)"
_MEMORY_MD = re.compile(r"`([^`\s]+)/MEMORY\.md`")
_PY_PATH = re.compile(r"\bsrc/[\w./-]+\.py\b")
_EXIT = re.compile(r"^Exit code: (-?\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Call:
    """One tool call of the current run and its output."""

    name: str
    args: dict[str, Any]
    output: str

    @property
    def cmd(self) -> str:
        return str(self.args.get("cmd", ""))

    @property
    def exit_code(self) -> int | None:
        match = _EXIT.search(self.output)
        return int(match.group(1)) if match else None

    @property
    def body(self) -> str:
        """The command's output without the status lines ``exec_command`` puts first."""
        _, sep, rest = self.output.partition("\nOutput:\n")
        return rest if sep else self.output


@dataclass(frozen=True)
class View:
    """A request as the policy sees it."""

    task: str
    instructions: str
    calls: list[Call]
    #: text of the conversation before the current task (earlier turns of a session)
    history: str

    @classmethod
    def of(cls, request: ModelRequest) -> View:
        items = request.input
        users = [i for i, item in enumerate(items) if item.get("role") == "user"]
        last = users[-1] if users else 0
        outputs = {
            item.get("call_id"): _text(item.get("output"))
            for item in items[last:]
            if item_kind(item) == "function_call_output"
        }
        calls = [
            Call(
                str(item.get("name")),
                _args(item.get("arguments")),
                outputs.get(item["call_id"], ""),
            )
            for item in items[last:]
            if item_kind(item) == "function_call"
        ]
        history = "\n".join(_item_text(item) for item in items[:last])
        task = message_text(items[last]) if users else ""
        return cls(task, request.instructions or "", calls, history)

    def find(self, name: str, contains: str = "") -> list[tuple[int, Call]]:
        """The calls of tool ``name`` whose arguments mention ``contains``, oldest first."""
        return [
            (index, call)
            for index, call in enumerate(self.calls)
            if call.name == name and contains in json.dumps(call.args)
        ]

    def last(self, name: str, contains: str = "") -> tuple[int, Call] | None:
        """The latest call of tool ``name`` whose arguments mention ``contains``."""
        found = self.find(name, contains)
        return found[-1] if found else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _args(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _item_text(item: Item) -> str:
    kind = item_kind(item)
    if kind == "message":
        return message_text(item)
    if kind == "function_call":
        return str(item.get("arguments", ""))
    if kind == "function_call_output":
        return _text(item.get("output"))
    return ""


def pytest_result(call: Call) -> str:
    """pytest's summary line (``1 failed, 1 passed``) without its timing."""
    lines = [line.strip() for line in call.body.splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {call.exit_code}"
    return re.sub(r"\s+in [\d.]+s\b.*$", "", last.strip("= "))


def _run_tests(view: View) -> Item:
    return tool_call("exec_command", {"cmd": f"{python_command()} -m pytest -q"})


def _refused(call: Call) -> str | None:
    """The error of an ``apply_patch`` call that changed nothing, else ``None``."""
    if call.output.startswith("Patch applied"):
        return None
    return call.output.strip().splitlines()[0] if call.output.strip() else "no output"


def _tests_after(view: View, index: int) -> Call | None:
    found = view.last("exec_command", "pytest")
    return found[1] if found is not None and found[0] > index else None


# ------------------------------------------------------------------------------- task 1: fix


def _fix_patch(source: str) -> str | None:
    lines = source.splitlines()
    at = next((i for i, line in enumerate(lines) if _BUGGY_EXPR in line), None)
    if at is None:
        return None
    header = next((lines[i] for i in range(at, -1, -1) if lines[i].lstrip().startswith("def ")), "")
    return "\n".join(
        [
            "*** Begin Patch",
            f"*** Update File: {BUGGY_FILE}",
            f"@@ {header.strip()}",
            f"-{lines[at]}",
            f"+{lines[at].replace(_BUGGY_EXPR, _FIXED_EXPR)}",
            "*** End Patch",
        ]
    )


def fix_invoice_bug(view: View) -> list[Item] | str:
    test_runs = view.find("exec_command", "pytest")
    if not test_runs:
        return [_run_tests(view)]
    first_tests = test_runs[0]
    read = view.last("exec_command", f"cat {BUGGY_FILE}")
    if read is None:
        return [tool_call("exec_command", {"cmd": f"cat {BUGGY_FILE}"})]
    patched = view.last("apply_patch")
    if patched is None:
        patch = _fix_patch(read[1].body)
        if patch is None:
            return (
                f"{BUGGY_FILE} does not add the tax rate to the subtotal any more; there is "
                "nothing to fix. Tests: " + pytest_result(first_tests[1]) + "."
            )
        return [tool_call("apply_patch", {"patch": patch})]
    if (error := _refused(patched[1])) is not None:
        return f"I could not fix {BUGGY_FILE}: the patch was refused ({error})."
    after = _tests_after(view, patched[0])
    if after is None:
        return [_run_tests(view)]
    before = pytest_result(first_tests[1])
    status = "pass" if after.exit_code == 0 else "still fail"
    return (
        f"Fixed the invoice total bug in {BUGGY_FILE}: `format_invoice_total` added the tax "
        f"rate to the subtotal (`round({_BUGGY_EXPR}, 2)`, so 100.0 at a 0.25 rate gave "
        f"100.25). It now applies the rate: `round({_FIXED_EXPR}, 2)`. The tests "
        f"(`{python_command()} -m pytest -q`) went from `{before}` to `{pytest_result(after)}`: "
        f"they {status}."
    )


# ------------------------------------------------------------- task 2: regression test

_REGRESSION_TEST = """\
from {module} import {function}


def test_tax_rate_is_applied_not_added():
    # Regression: the total used to be subtotal + tax_rate (100.0 at 0.2 gave 100.2).
    assert {function}(100.0, 0.2) == 120.0
    assert {function}(19.99, 0.08) == 21.59
    assert {function}(0.0, 0.2) == 0.0
"""


def _module_of(path: str) -> str:
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".")


def _enclosing_function(source: str, expression: str) -> str | None:
    """The name of the function whose body holds ``expression``."""
    current = None
    for line in source.splitlines():
        if match := re.match(r"def (\w+)\(", line):
            current = match.group(1)
        elif expression in line:
            return current
    return None


def add_regression_test(view: View) -> list[Item] | str:
    memories_dir = m.group(1) if (m := _MEMORY_MD.search(view.instructions)) else None
    searched = view.last("exec_command", "MEMORY.md")
    if memories_dir is not None and searched is None:
        pattern = "'invoice|tax|fix'"
        return [
            tool_call("exec_command", {"cmd": f"grep -n -i -E {pattern} {memories_dir}/MEMORY.md"})
        ]
    from_memory = " ".join([view.instructions, searched[1].body if searched else ""])
    found = _PY_PATH.search(from_memory) or _PY_PATH.search(view.history)
    if found is None:
        return (
            "I cannot tell which bug you mean: this workspace has no memory of an earlier fix "
            "and the task does not name a file. Tell me which bug to cover."
        )
    target = found.group(0)
    source_from = "memory" if _PY_PATH.search(from_memory) else "this conversation"
    read = view.last("exec_command", f"cat {target}")
    if read is None:
        return [tool_call("exec_command", {"cmd": f"cat {target}"})]
    if _BUGGY_EXPR in read[1].body:
        return (
            f"{source_from.capitalize()} says the bug in {target} was fixed, but the file still "
            f"computes `{_BUGGY_EXPR}`: the fix is not in this workspace, so a regression test "
            "would fail. Fix the bug first."
        )
    function = _enclosing_function(read[1].body, _FIXED_EXPR) or "format_invoice_total"
    test_path = f"tests/test_{function.removeprefix('format_')}_regression.py"
    patched = view.last("apply_patch")
    if patched is None:
        content = _REGRESSION_TEST.format(module=_module_of(target), function=function)
        patch = "\n".join(
            ["*** Begin Patch", f"*** Add File: {test_path}"]
            + [f"+{line}" for line in content.splitlines()]
            + ["*** End Patch"]
        )
        return [tool_call("apply_patch", {"patch": patch})]
    if (error := _refused(patched[1])) is not None:
        return f"I could not add {test_path}: the patch was refused ({error})."
    after = _tests_after(view, patched[0])
    if after is None:
        return [_run_tests(view)]
    status = "pass" if after.exit_code == 0 else "fail"
    return (
        f"Added {test_path}: a regression test for `{function}` in {target}, checking that the "
        "tax rate is applied (100.0 at 0.2 gives 120.0), not added to the subtotal as the bug "
        f"did. `{python_command()} -m pytest -q`: `{pytest_result(after)}`, the tests {status}. "
        f"Which bug and which file came from {source_from}"
        + (
            " (an earlier run, so possibly out of date); I checked the current code before "
            "writing the test."
            if source_from == "memory"
            else "."
        )
    )


# ------------------------------------------------------------------------------- the model


def _policy(request: ModelRequest) -> list[Item] | str:
    view = View.of(request)
    task = view.task.lower()
    if "regression test" in task:
        return add_regression_test(view)
    if "invoice" in task and ("fix" in task or "bug" in task):
        return fix_invoice_bug(view)
    return (
        "I am the offline scripted agent of the sandmem demo, not a language model: I can fix "
        "the invoice total bug and add a regression test for it, nothing else."
    )


def scripted_engineer() -> FunctionModel:
    """The offline demo's agent as a ``FunctionModel`` (deterministic, no network)."""
    return FunctionModel(_policy, name="scripted-engineer")
