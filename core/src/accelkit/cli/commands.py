"""Helpers the ``accelkit`` sub-commands use to read their words. The sub-commands themselves are records
(:class:`~accelkit.records.CommandRecord`) registered through the ``accelkit_register_commands`` hook; the
core's are in :mod:`accelkit.plugins.builtin`."""

from __future__ import annotations


def load_module_class(target: str) -> type:
    """Import ``path/to/file.py:ClassName`` or ``package.module:ClassName`` (an :class:`accelkit.Module`).

    A file is imported under its own stem through a finder registered for that one name
    (:func:`accelkit.utilities.file_modules.import_file`): its folder is on ``sys.path`` only while the file itself
    runs, and ``sys.path`` is the same after. The name is also passed to worker processes (in the environment
    variable :data:`accelkit.utilities.file_modules.ENVIRONMENT_VARIABLE`), so those started with the ``spawn``
    method import the same file again by that name. A ``package.module`` target is imported as usual, with the
    current folder added to ``sys.path`` when neither it nor ``""`` is there (as ``python -m`` would).
    """
    from accelkit.cli.class_paths import load_class
    from accelkit.module.module import Module

    return load_class(target, Module, "accelkit.Module")
