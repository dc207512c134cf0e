"""The public surface of ``sandmem.models``."""

from __future__ import annotations

import subprocess
import sys

import sandmem.models


def test_all_is_sorted_and_resolves() -> None:
    names = sandmem.models.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(sandmem.models, name) is not None
    assert set(names) <= set(dir(sandmem.models))


def test_openai_is_imported_only_when_needed() -> None:
    code = (
        "import sys, sandmem, sandmem.models\n"
        "assert 'openai' not in sys.modules, 'eager import'\n"
        "sandmem.models.OpenAIProvider().get_model(None)\n"
        "assert 'openai' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
