"""Loggers by name: ``Trainer(logger="tensorboard")`` resolves through the ``accelkit_register_loggers`` hook.

The core registers ``csv`` and ``tensorboard`` (alias ``tb``); a tracker's distribution registers its own name
(``accelkit-mlflow`` registers ``mlflow``). An unknown name is an error listing the registered names, the close one
and, for trackers accelkit knows of, the distribution to install.
"""

from __future__ import annotations

import warnings
from typing import Any

from accelkit.errors import ConfigurationError, PluginConflictError
from accelkit.records import LoggerRecord, lookup_key

#: logger names with a known distribution that provides them (for the "not installed" message)
KNOWN_DISTRIBUTIONS = {"mlflow": "accelkit-mlflow"}


def logger_table(manager: Any) -> dict[str, LoggerRecord]:
    """Every registered logger, keyed by each of its names (:func:`~accelkit.records.lookup_key` form).

    A plugin whose hook raises is skipped with a warning; a name two plugins claim is left out of the table and
    raises :class:`~accelkit.errors.PluginConflictError` when asked for (see :func:`find_logger`).
    """
    return _collect(manager)[0]


def _collect(manager: Any) -> tuple[dict[str, LoggerRecord], dict[str, list[str]]]:
    table: dict[str, LoggerRecord] = {}
    claims: dict[str, list[str]] = {}
    for impl in reversed(manager.hook.accelkit_register_loggers.get_hookimpls()):  # registration order
        provider = manager.provider_of(impl.plugin)
        try:
            records = list(impl.function() or [])
        except Exception as exc:  # noqa: BLE001 - one broken plugin must not hide the others' loggers
            warnings.warn(f"{provider}: accelkit_register_loggers() raised {type(exc).__name__}: {exc}; its loggers "
                          "are skipped", RuntimeWarning, stacklevel=2)
            continue
        for record in records:
            if not isinstance(record, LoggerRecord):
                warnings.warn(f"{provider}: accelkit_register_loggers() returned {record!r}, not a LoggerRecord; "
                              "skipped", RuntimeWarning, stacklevel=2)
                continue
            object.__setattr__(record, "provider", provider)
            for name in record.names:
                key = lookup_key(name)
                holders = claims.setdefault(key, [])
                if provider not in holders:
                    holders.append(provider)
                table.setdefault(key, record)
    conflicts = {key: holders for key, holders in claims.items() if len(holders) > 1}
    for key in conflicts:
        table.pop(key, None)
    return table, conflicts


def logger_names(manager: Any) -> list[str]:
    """The canonical names of the registered loggers."""
    return sorted({record.name for record in logger_table(manager).values()})


def find_logger(name: str, manager: Any) -> LoggerRecord:
    """The record registered as ``name``.

    :raise ConfigurationError: for an unknown name: the registered names, the close one, the distribution to
        install when the name is a tracker accelkit knows of.
    :raise PluginConflictError: when two plugins claim the name.
    """
    table, conflicts = _collect(manager)
    key = lookup_key(name)
    if key in conflicts:
        raise PluginConflictError(f"logger name {name!r} is claimed by {' and '.join(conflicts[key])}; uninstall one "
                                  "or block one with ACCELKIT_BLOCK_PLUGINS")
    if key in table:
        return table[key]
    from accelkit.plugins.manager import suggest

    names = sorted({r.name for r in table.values()})
    install = KNOWN_DISTRIBUTIONS.get(key)
    hint = f" It is provided by {install}: pip install {install}." if install else suggest(name, names)
    raise ConfigurationError(f"logger={name!r} is not a registered logger.{hint} Registered loggers: "
                             f"{', '.join(names)}; or pass a logger instance (accelkit.loggers.Logger)")


def build_logger(name: str, save_dir: Any, manager: Any) -> Any:
    """The logger registered as ``name``, built as ``cls(save_dir=save_dir)``."""
    record = find_logger(name, manager)
    try:
        cls = record.load()
    except ImportError as exc:
        raise ConfigurationError(f"logger={name!r} ({record.provider}) cannot be imported: {exc}") from exc
    return cls(save_dir=save_dir)
