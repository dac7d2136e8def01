"""The registry of ``accelkit`` sub-commands, and the helpers every command uses to read its words."""

from __future__ import annotations

import argparse
from typing import Any, Callable

#: sub-command name -> (help, function adding arguments, function running it)
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None]) -> Callable:
    """Register a sub-command (used by this module; plugins may add their own)."""

    def decorate(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (help, arguments, run)
        return run

    return decorate


#: commands that read their own words (fit/validate/test/predict, on jsonargparse): name -> (help, run(words))
RAW_COMMANDS: dict[str, tuple[str, Callable[[list[str]], int]]] = {}


def raw_command(name: str, help: str) -> Callable:
    """Register a sub-command that parses its own arguments: ``run(words)`` gets the words after its name."""

    def decorate(run: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
        RAW_COMMANDS[name] = (help, run)
        return run

    return decorate


def load_module_class(target: str) -> type:
    """Import ``path/to/file.py:ClassName`` or ``package.module:ClassName`` (an :class:`accelkit.Module`).

    A file is imported under its own stem with its folder put first on ``sys.path``, so worker processes
    started with the ``spawn`` method can import it again by name.
    """
    from accelkit.cli.class_paths import load_class
    from accelkit.module.module import Module

    return load_class(target, Module, "accelkit.Module")


def parse_value(text: str) -> Any:
    """``"2"`` -> 2, ``"1.5"`` -> 1.5, ``"[0, 1]"`` -> [0, 1], anything else stays a string."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
