"""Owns looking at memory (status, conversations, files, ranked search, the viewer page), and
imports memory's core and the floors below (never
``memory.generation``, the memory API ``sandmem.memory``, ``capabilities`` or anything above).

Read-only over a layout: the only file it writes is the derived layout index (``_index``,
``.index.sqlite``); forgetting is the memory API's (``memory/api/_forget.py``).
``tests/test_layering.py`` holds it to both.
"""
