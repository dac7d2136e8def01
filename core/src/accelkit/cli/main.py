"""The ``accelkit`` command.

accelkit fit examples/digits.py:DigitsClassifier --devices 2 --strategy ddp_spawn"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

# the core's command modules register their sub-commands when imported
from accelkit.cli import checkpoint_command, doctor, stage_commands  # noqa: F401
from accelkit.cli.commands import COMMANDS, RAW_COMMANDS


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``accelkit`` command."""
    from accelkit.__about__ import __version__

    parser = argparse.ArgumentParser(
        prog="accelkit",
        description="Train PyTorch modules on any accelerator a plugin provides.",
        epilog="Run 'accelkit COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"accelkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, _) in RAW_COMMANDS.items():  # listed here; main() hands them their words
        sub.add_parser(name, help=help_text, add_help=False)
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(sub_parser)
        sub_parser.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``accelkit`` command."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in RAW_COMMANDS:
        def run() -> int:
            return RAW_COMMANDS[words[0]][1](words[1:])
    else:
        parser = build_parser()
        args = parser.parse_args(words)
        if getattr(args, "run", None) is None:
            parser.print_help()
            return 2

        def run() -> int:
            return args.run(args)
    from accelkit.errors import AccelkitError

    try:
        return int(run() or 0)
    except AccelkitError as exc:
        print(f"accelkit: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `accelkit plugins | head`: the reader left; that is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


