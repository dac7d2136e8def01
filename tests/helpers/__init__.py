"""Importable helpers for accelkit's own tests.

Worker processes started with the ``spawn`` method re-import the classes they run by module name, so the
test Modules and Callbacks live here (``helpers.models``) rather than inside test files. Test files put the
``tests`` folder on ``sys.path``; spawned children inherit ``sys.path`` from their parent.
"""
