"""What a run is made of: ``Agent``, function tools, tool-use behaviour, hooks, the run
context handed to tools, ``RunConfig`` / ``SandboxRunConfig``, output schemas, stream events,
conversation sessions (``SQLiteSession``) and the ``Capability`` base with the
``SandboxedAgent`` protocol the run loop depends on.

Private modules behind the public surface of ``sandmem``. Imports only the foundation,
``models`` and ``sandboxes``; never ``run``, ``memory``, ``capabilities`` or anything above.
"""
