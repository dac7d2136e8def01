"""Importable helpers for accelkit's own tests.

Worker processes started with the ``spawn`` method re-import the classes they run by module name, so the
test Modules and Callbacks live here (``helpers.models``) rather than inside test files. The root
``conftest.py`` puts the ``tests`` folder on ``sys.path`` for every test file, the plugins' included; spawned
children inherit ``sys.path`` from their parent, other subprocesses get it from ``helpers.guards.child_env()``.
Suite-wide fixtures are in ``helpers.fixtures``.
"""
