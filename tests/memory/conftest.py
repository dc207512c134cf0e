"""The memory tests' shared helpers (``memory_doubles``, ``memory_worker``) live in this folder:
pytest puts it on ``sys.path`` for this conftest, so the tests in its subfolders (which mirror
``sandmem/memory/``) import them as the ones here do."""
