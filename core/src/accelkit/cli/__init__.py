"""The ``accelkit`` command and the configuration-driven :class:`~accelkit.cli.CLI` (Lightning's ``LightningCLI``).

- :mod:`~accelkit.cli.main`: the parser and :func:`main` (``accelkit ...``, ``python -m accelkit.cli ...``); the
  sub-commands are :class:`~accelkit.records.CommandRecord` s registered through the ``accelkit_register_commands``
  hook (the core's in ``accelkit.plugins.builtin``);
- ``commands``: helpers the commands use to read their words;
- :mod:`~accelkit.cli.plugins_command` and :mod:`~accelkit.cli.doctor`: ``accelkit plugins`` and ``accelkit doctor``;
- :mod:`~accelkit.cli.stage_commands`, :mod:`~accelkit.cli.checkpoint_command`: ``fit|validate|test|predict``
  (``--config`` files and options, or ``fit file.py:Class --max-epochs 3``), ``checkpoint``;
- ``lightning_cli`` and :mod:`~accelkit.cli.config`: :class:`~accelkit.cli.CLI` on jsonargparse, with
  :mod:`~accelkit.cli.class_paths`, :mod:`~accelkit.cli.config_errors` and :mod:`~accelkit.cli.help_text` (``--help``
  as plain text).

The jsonargparse-based names (``CLI``, ``LightningCLI``, ``ArgumentParser``, ``SaveConfigCallback``, ...) are
imported on first use, so the ``accelkit`` command starts without jsonargparse.
"""

from __future__ import annotations

from typing import Any

from accelkit.cli.commands import load_module_class
from accelkit.cli.doctor import doctor_report
from accelkit.cli.main import build_parser, main
from accelkit.cli.plugins_command import plugin_report
from accelkit.utilities.deprecation import deprecated_attribute

#: names imported on first use: name -> (module, attribute)
_LAZY = {
    "CLI": ("accelkit.cli.lightning_cli", "CLI"),
    "LightningCLI": ("accelkit.cli.lightning_cli", "CLI"),
    "ArgumentParser": ("accelkit.cli.config", "ArgumentParser"),
    "LightningArgumentParser": ("accelkit.cli.config", "ArgumentParser"),
    "ArgsType": ("accelkit.cli.config", "ArgsType"),
    "ReduceLROnPlateau": ("accelkit.cli.config", "ReduceLROnPlateau"),
    "SaveConfigCallback": ("accelkit.cli.config", "SaveConfigCallback"),
    "instantiate_class": ("accelkit.cli.config", "instantiate_class"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    # a name removed from the plugin API keeps working, with a DeprecationWarning, until the next major version
    return deprecated_attribute(__name__, name)


__all__ = ["build_parser", "doctor_report", "load_module_class", "main", "plugin_report", *_LAZY]
