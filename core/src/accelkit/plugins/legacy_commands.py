"""The hook API 1.1 way of adding ``accelkit`` sub-commands, kept for one more minor version.

``accelkit.cli.command`` and ``accelkit.cli.raw_command`` (deprecated since hook API 1.2, removed in 2.0; see
:mod:`accelkit.utilities.deprecation`) were decorators a plugin module applied at import. Each decorated function
becomes a :class:`~accelkit.records.CommandRecord` here; the plugin manager hands it to the registry
(:class:`~accelkit.plugins.Registry`) for the loaded plugin whose package defined the function, as if that plugin's
``accelkit_register_commands`` had returned it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from accelkit.records import CommandRecord

#: every command registered through the deprecated decorators in this process, in registration order
LEGACY_COMMANDS: list[CommandRecord] = []


_Run = TypeVar("_Run", bound=Callable[[argparse.Namespace], "int | None"])
_RawRun = TypeVar("_RawRun", bound=Callable[[list[str]], "int | None"])


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> Callable:
    """Deprecated (hook API 1.2): register ``run(args)`` as ``accelkit NAME``, with ``arguments(parser)`` adding
    its options. Use an ``accelkit_register_commands`` hook returning :class:`~accelkit.records.CommandRecord`."""

    def decorate(run: _Run) -> _Run:
        LEGACY_COMMANDS.append(CommandRecord(name, help, add_arguments=arguments, run=run))
        return run

    return decorate


def raw_command(name: str, help: str) -> Callable:
    """Deprecated (hook API 1.2): register ``run(words)``, a command that parses its own words. Use
    ``CommandRecord(..., raw=True)`` from an ``accelkit_register_commands`` hook."""

    def decorate(run: _RawRun) -> _RawRun:
        LEGACY_COMMANDS.append(CommandRecord(name, help, run=run, raw=True))
        return run

    return decorate


def commands_of(plugin: object) -> list[CommandRecord]:
    """The deprecated-decorator commands defined in ``plugin``'s top-level package (its module or a sibling)."""
    package = getattr(plugin, "__name__", "").partition(".")[0]
    if not package:
        return []
    return [r for r in LEGACY_COMMANDS if getattr(r.run, "__module__", "").partition(".")[0] == package]
