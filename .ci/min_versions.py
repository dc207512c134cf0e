"""Print pip constraints pinning every runtime dependency of pyproject.toml to its declared
lower bound (``openai>=1.66`` -> ``openai==1.66``), so CI can test exactly those versions.

``--test-requirements`` prints the ``dev`` extra's pytest packages instead (what running the
tests needs, without the linters)."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_BOUND = re.compile(r"^\s*([A-Za-z0-9._-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    project = tomllib.loads(Path(args[0] if args else "pyproject.toml").read_text())["project"]
    if "--test-requirements" in sys.argv:
        for dep in project["optional-dependencies"]["dev"]:
            if dep.startswith("pytest"):
                print(dep)
        return 0
    deps = project["dependencies"]
    for dep in deps:
        match = _BOUND.match(dep)
        if match is None:
            print(f"error: {dep!r} declares no lower bound (>=)", file=sys.stderr)
            return 1
        print(f"{match.group(1)}=={match.group(2)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
