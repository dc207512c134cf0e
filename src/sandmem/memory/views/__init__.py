"""Looking at memory: status, conversations, files, ranked search and the viewer page.

Read-only over a layout (forgetting, the one write, lives in ``_maintenance`` beside the
status it reports). May import memory's core, ``memory.store``, ``memory.generation`` (for
the pending rules it shares) and the floors below; must not import the memory API
(``sandmem.memory``), ``capabilities`` or anything above.
"""
