"""Owns looking at memory (status, conversations, files, ranked search, the viewer page), and
imports memory's core, ``memory.store``, ``memory.generation`` and the floors below (never the
memory API ``sandmem.memory``, ``capabilities`` or anything above).

Read-only over a layout, except forgetting, which lives in ``_maintenance`` beside the status
it reports; the layout index (``_index``) is derived data it keeps.
"""
