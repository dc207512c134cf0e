"""Owns what a run is made of, and imports only the foundation, ``models`` and ``sandboxes``
(never ``run``, ``memory``, ``capabilities`` or anything above).

``Agent``, function tools and their outputs, tool-use behaviour, hooks, the run context handed
to tools, ``RunConfig`` / ``SandboxRunConfig``, output schemas, stream events, conversation
sessions (``SQLiteSession``), the ``Capability`` base with the ``SandboxedAgent`` protocol the
run loop depends on, and MCP servers as tool sources (the ``mcp`` SDK is imported only when a
server connects): private modules behind the public surface of ``sandmem``.
"""
