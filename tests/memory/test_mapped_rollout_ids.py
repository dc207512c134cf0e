"""A conversation id mapped to a file-safe rollout id cannot be claimed by another raw id, look-
alike characters included (issue 25, class 10)."""

from __future__ import annotations

import pytest

from sandmem.memory.rollouts import conversation_rollout_id, file_safe_rollout_id

# -- class 10: mapped ids cannot be claimed ------------------------------------------------


@pytest.mark.parametrize("other", ["alice@example.com:thread 7", "a/b", "x y", "é"])
def test_a_raw_id_never_equals_the_mapped_form_of_another(other: str) -> None:
    mapped = file_safe_rollout_id(other)
    look_alikes = (
        mapped.replace("--", "\u2010\u2010"),  # Unicode hyphens
        mapped.replace("--", "\uff0d\uff0d"),  # full-width hyphens
        "\u200b" + mapped,  # a zero-width space
        mapped + "\x00",
        mapped.casefold(),
        mapped.swapcase(),
        mapped[:-1] + chr(ord(mapped[-1]) + 0xFEE0),  # a full-width last digit
    )
    for claim in (mapped, mapped.upper(), mapped.lower(), f" {mapped} ", mapped[:-8], *look_alikes):
        assert conversation_rollout_id(claim)[0] != mapped, claim
