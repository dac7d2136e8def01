"""The ``accelkit`` command (also ``python -m accelkit.cli``).

    accelkit fit examples/digits.py:DigitsClassifier --devices 2 --strategy ddp_spawn

Its sub-commands are records (:class:`~accelkit.records.CommandRecord`) registered through the
``accelkit_register_commands`` hook, the core's own included: they are loaded from the plugins before the parser
is built, and ``accelkit --help`` lists each with the distribution that provides it."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Sequence

from accelkit.errors import AccelkitError
from accelkit.plugins.manager import PluginManager
from accelkit.plugins.registry import CORE_PROVIDER, Registry
from accelkit.records import CommandRecord


def load_commands() -> tuple[PluginManager, list[warnings.WarningMessage]]:
    """A plugin manager with every installed plugin's commands, and the warnings loading them gave (a plugin that
    failed, a name claimed twice), for the caller to show or leave to a command that reports them itself."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = PluginManager()
        manager.registry  # noqa: B018 - the registration hooks run now, so their failures are in `caught`
    return manager, list(caught)


def _help_line(record: CommandRecord) -> str:
    return record.help if record.provider == CORE_PROVIDER else f"{record.help} [{record.provider}]"


def build_parser(manager: PluginManager | None = None,
                 selected: CommandRecord | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``accelkit`` command: one sub-parser per registered command.

    :param manager: the plugin manager the commands come from (a fresh one when omitted).
    :param selected: the command about to run; only its ``add_arguments`` is called (the others are listed by name
        and help only, so a plugin's broken option set cannot break the rest of ``accelkit``).
    """
    from accelkit.__about__ import __version__

    manager = manager or load_commands()[0]
    parser = argparse.ArgumentParser(
        prog="accelkit",
        description="Train PyTorch modules on any accelerator a plugin provides.",
        epilog="Run 'accelkit COMMAND --help' for a command's options. A command marked [distribution] comes from "
               "that installed plugin; 'accelkit plugins' lists every plugin.",
    )
    parser.add_argument("--version", action="version", version=f"accelkit {__version__}")
    parser.set_defaults(plugin_manager=manager)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for record in manager.registry.command_records():
        if record.raw:  # listed here; main() hands it its words
            sub.add_parser(record.name, aliases=list(record.aliases), help=_help_line(record), add_help=False)
            continue
        sub_parser = sub.add_parser(record.name, aliases=list(record.aliases), help=_help_line(record),
                                    description=record.help)
        sub_parser.set_defaults(command_record=record)
        add_arguments = record.load_add_arguments() if record is selected else None
        if add_arguments is not None:
            add_arguments(sub_parser)
    return parser


def _selected(registry: Registry, words: list[str]) -> CommandRecord | None:
    """The command the first word names (case, ``-`` versus ``_`` ignored), or ``None``."""
    if not words or words[0].startswith("-"):
        return None
    return registry.find_named(registry.commands, words[0])


def _prepare(words: list[str]) -> Callable[[], int | None] | None:
    """The function that runs what ``words`` ask for (``None``: print the help and exit with 2)."""
    manager, caught = load_commands()
    record = _selected(manager.registry, words)
    if record is None or record.provider != CORE_PROVIDER:
        # the core's commands report plugin problems their own way (plugins, doctor, the Trainer's own warnings)
        for warning in caught:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    try:
        if record is not None and record.raw:
            run_raw = record.load_run()
            return lambda: run_raw(words[1:])
        parser = build_parser(manager, record)
        run = record.load_run() if record is not None else None
    except AccelkitError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's broken command must not look like an accelkit crash
        assert record is not None  # only a selected command's functions are loaded
        raise CommandSetupError(f"command {record.name!r} ({record.provider}) could not be set up: "
                                f"{type(exc).__name__}: {exc}") from exc
    args = parser.parse_args([record.name, *words[1:]] if record is not None else words)
    if run is None:
        parser.print_help()
        return None
    assert record is not None
    return lambda: _run_command(record, run, args, manager)


def _run_command(record: CommandRecord, run: Callable[[argparse.Namespace], int | None], args: argparse.Namespace,
                 manager: PluginManager) -> int | None:
    """Run a command; a plugin's command that raises something other than an accelkit error shows its traceback,
    then a last line naming the command, its plugin and distribution (the traceback alone does not)."""
    if record.provider == CORE_PROVIDER:
        return run(args)
    try:
        return run(args)
    except (AccelkitError, KeyboardInterrupt, SystemExit, BrokenPipeError):
        raise
    except Exception as exc:  # noqa: BLE001 - reported with its traceback and its owner
        plugin = next((i.name for i in manager.infos.values() if i.provider == record.provider), "")
        owner = f"plugin {plugin!r} ({record.provider})" if plugin else record.provider
        traceback.print_exc()
        raise PluginCommandError(f"command {record.name!r} of {owner} raised {type(exc).__name__}: {exc} (the "
                                 f"traceback above is the plugin's: report it to the authors of "
                                 f"{record.provider.split()[0]})") from exc


class CommandSetupError(AccelkitError):
    """A command's ``add_arguments`` or ``run`` could not be imported or raised while its parser was built."""


class PluginCommandError(AccelkitError):
    """A plugin's command raised an exception that is not an :class:`~accelkit.errors.AccelkitError`."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accelkit`` command: exit status 0 on success, 1 for an
    :class:`~accelkit.errors.AccelkitError` (printed as ``accelkit: error: ...``), 2 without a command."""
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        run = _prepare(words)
        if run is None:
            return 2
        return int(run() or 0)
    except AccelkitError as exc:
        print(f"accelkit: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `accelkit plugins | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
