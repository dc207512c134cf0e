"""Owns how a run goes, and imports ``agent``, ``tracing`` and the floors below (never
``memory``, ``capabilities`` or anything above).

``Runner`` (``run``, ``run_sync``, ``run_streamed``), the one run loop that produces events,
retries of its model requests, the sandbox scope (a run's session, created and deleted when the
run owns it) and run tracing: private modules behind ``sandmem.Runner``. The loop knows
capabilities only through the ``agent`` floor's ``Capability`` base and ``SandboxedAgent``
protocol.
"""
