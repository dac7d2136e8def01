"""Helpers the ``accelkit`` sub-commands use to read their words. The sub-commands themselves are records
(:class:`~accelkit.records.CommandRecord`) registered through the ``accelkit_register_commands`` hook; the
core's are in :mod:`accelkit.plugins.builtin`."""

from __future__ import annotations


def load_module_class(target: str) -> type:
    """Import ``path/to/file.py:ClassName`` or ``package.module:ClassName`` (an :class:`accelkit.Module`).

    A file is imported under its own stem with its folder put first on ``sys.path``, so worker processes
    started with the ``spawn`` method can import it again by name.
    """
    from accelkit.cli.class_paths import load_class
    from accelkit.module.module import Module

    return load_class(target, Module, "accelkit.Module")
