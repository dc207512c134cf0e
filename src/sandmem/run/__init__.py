"""How a run goes: ``Runner`` (``run``, ``run_sync``, ``run_streamed``), the one run loop that
produces events, the sandbox scope (a run's session, created and deleted when the run owns
it) and run tracing.

Private modules behind ``sandmem.Runner``. Imports ``agent`` and the floors below; never
``memory``, ``capabilities`` or anything above (the loop knows capabilities only through the
``agent`` floor's ``Capability`` base and ``SandboxedAgent`` protocol).
"""
