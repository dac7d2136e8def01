"""``accelkit fit|validate|test|predict``: the :class:`~accelkit.cli.CLI` machinery as commands.

    accelkit fit --config run.yaml --model path/to/models.py:Net --data mypackage.data:Digits
    accelkit test --config lightning_logs/version_0/config.yaml --ckpt_path last

``--model``/``--data`` take ``path/to/file.py:Class`` or ``package.module:Class`` besides the dotted class paths
of the configuration files. The former form ``accelkit fit file.py:Class --max-epochs 3 ...`` (a target first)
still trains and then tests, with the options it always had.
"""

from __future__ import annotations

import argparse
import os
import sys

from accelkit.cli.file_command import add_file_fit_arguments, run_file_fit
from accelkit.trainer.summary import print_fit_summary

_TARGET_OPTIONS = {"--model": ("accelkit.module.module", "Module", "accelkit.Module"),
                   "--data": ("accelkit.module.datamodule", "DataModule", "accelkit.DataModule")}


def resolve_targets(words: list[str]) -> list[str]:
    """``--model``/``--data`` values of the form ``file.py:Class`` or ``package.module:Class`` rewritten as
    dotted class paths (the class imported, so configuration parsing finds it)."""
    import importlib

    from accelkit.cli.class_paths import dotted_class_path

    out = list(words)
    for index, word in enumerate(out):
        option, equals, value = word.partition("=")
        if option not in _TARGET_OPTIONS:
            continue
        module, name, kind = _TARGET_OPTIONS[option]
        base = getattr(importlib.import_module(module), name)
        if equals and ":" in value:
            out[index] = f"{option}={dotted_class_path(value, base, kind)}"
        elif not equals and index + 1 < len(out) and ":" in out[index + 1] and not out[index + 1].startswith("{"):
            out[index + 1] = dotted_class_path(out[index + 1], base, kind)
    return out


def _make_cli_class() -> type:
    from accelkit.cli.lightning_cli import CLI

    class CommandCLI(CLI):
        """The CLI of the ``accelkit`` command: says where the configuration went and what the run measured."""

        def _report(self, what: str) -> None:
            trainer = self.trainer
            if what == "fit" and trainer.progress_bar_callback is None:  # with a bar, fit() printed it
                print_fit_summary(trainer)
            if trainer.is_global_zero and self.save_config_callback is not None and not trainer.fast_dev_run:
                print(f"accelkit: configuration saved to {os.path.join(trainer.log_dir, 'config.yaml')} "
                      f"(repeat with --config)")

        def after_fit(self) -> None:
            self._report("fit")

    return CommandCLI


def run_config_command(subcommand: str, words: list[str]) -> int:
    """Run ``subcommand`` through :class:`~accelkit.cli.CLI` with ``--model``/``--data`` given on the command
    line or in ``--config`` files."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # class paths of modules in the current folder import, as with python -m
    cli_class = _make_cli_class()
    cli_class(args=[subcommand, *resolve_targets(words)], parser_kwargs={"prog": "accelkit"})
    return 0


def _legacy(words: list[str]) -> bool:
    return bool(words) and not words[0].startswith("-")


def run_fit(words: list[str]) -> int:
    """``accelkit fit``: train from ``--config`` files and options, or the older ``accelkit fit file.py:Class``."""
    if _legacy(words):
        parser = argparse.ArgumentParser(prog="accelkit fit", description="train a Module, then report its test "
                                         "metrics (the form before configuration files)")
        add_file_fit_arguments(parser)
        return run_file_fit(parser.parse_args(words))
    return run_config_command("fit", words)


def run_validate(words: list[str]) -> int:
    """``accelkit validate``: the validation loop once, from ``--config`` files and options."""
    return run_config_command("validate", words)


def run_test(words: list[str]) -> int:
    """``accelkit test``: the test loop once, from ``--config`` files and options."""
    return run_config_command("test", words)


def run_predict(words: list[str]) -> int:
    """``accelkit predict``: prediction, from ``--config`` files and options."""
    return run_config_command("predict", words)


__all__ = ["run_fit", "run_predict", "resolve_targets", "run_config_command", "run_test",
           "run_validate"]
