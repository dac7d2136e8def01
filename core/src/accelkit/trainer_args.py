"""Checking and normalising the Trainer's run-control arguments (everything but the composition strings)."""

from __future__ import annotations

import datetime
import math
import numbers
import os
from pathlib import Path
from typing import Any

from accelkit.callbacks.base import Callback
from accelkit.errors import ConfigurationError

#: arguments of Lightning's Trainer that only make sense with Lightning AI's own services
CLOUD_ONLY = {
    "model_registry": "model_registry uploads checkpoints to Lightning AI's cloud model registry, a Lightning "
                      "service that accelkit does not talk to; remove the argument (checkpoints are written under "
                      "default_root_dir, or where your ModelCheckpoint says)",
}


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_limit(name: str, value: Any, problems: list[str]) -> None:
    """A ``limit_*_batches``/``overfit_batches`` value: ``None``, an int >= 0 or a float in [0, 1]."""
    if value is None:
        return
    if _is_int(value):
        if value < 0:
            problems.append(f"{name}={value!r} must be >= 0 (an int number of batches or a fraction in [0, 1]).")
    elif isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            problems.append(f"{name}={value!r} is a float, so a fraction: it must be in [0, 1] (or give an int "
                            "number of batches).")
    else:
        problems.append(f"{name}={value!r} must be an int number of batches or a float fraction in [0, 1].")


def check_run_arguments(args: dict[str, Any]) -> list[str]:
    """Every problem with the run-control arguments, each a sentence naming the value and what works."""
    problems: list[str] = []
    max_epochs = args["max_epochs"]
    if max_epochs is not None and (not _is_int(max_epochs) or max_epochs < -1):
        problems.append(f"max_epochs={max_epochs!r} must be an int >= 0, -1 for no limit, or None.")
    if not _is_int(args["max_steps"]) or args["max_steps"] < -1:
        problems.append(f"max_steps={args['max_steps']!r} must be an int >= 0, or -1 for no limit.")
    for name in ("min_epochs", "min_steps"):
        if args[name] is not None and (not _is_int(args[name]) or args[name] < 0):
            problems.append(f"{name}={args[name]!r} must be an int >= 0 or None.")
    if not _is_int(args["accumulate_grad_batches"]) or args["accumulate_grad_batches"] < 1:
        problems.append(f"accumulate_grad_batches={args['accumulate_grad_batches']!r} must be an int >= 1.")
    if args["gradient_clip_algorithm"] not in (None, "norm", "value"):
        problems.append(f"gradient_clip_algorithm={args['gradient_clip_algorithm']!r} must be 'norm' or 'value'.")
    clip = args["gradient_clip_val"]
    if clip is not None and (not isinstance(clip, numbers.Real) or isinstance(clip, bool) or clip < 0):
        problems.append(f"gradient_clip_val={clip!r} must be a number >= 0 or None.")
    if not _is_int(args["log_every_n_steps"]) or args["log_every_n_steps"] < 1:
        problems.append(f"log_every_n_steps={args['log_every_n_steps']!r} must be an int >= 1.")
    every = args["check_val_every_n_epoch"]
    if every is not None and (not _is_int(every) or every < 1):
        problems.append(f"check_val_every_n_epoch={every!r} must be an int >= 1, or None (with an int "
                        "val_check_interval counting batches across epochs).")
    interval = args["val_check_interval"]
    if _is_int(interval):
        if interval < 1:
            problems.append(f"val_check_interval={interval!r} must be >= 1 batch (or a fraction in (0, 1]).")
    elif isinstance(interval, float):
        if not 0.0 < interval <= 1.0:
            problems.append(f"val_check_interval={interval!r} is a fraction of the epoch: it must be in (0, 1].")
    else:
        problems.append(f"val_check_interval={interval!r} must be an int number of batches or a fraction in (0, 1].")
    if every is None and not _is_int(interval):
        problems.append("check_val_every_n_epoch=None needs an int val_check_interval (batches between validations).")
    sanity = args["num_sanity_val_steps"]
    if not _is_int(sanity) or sanity < -1:
        problems.append(f"num_sanity_val_steps={sanity!r} must be an int >= 0, or -1 for the whole validation set.")
    fast = args["fast_dev_run"]
    if not (isinstance(fast, bool) or (_is_int(fast) and fast >= 0)):
        problems.append(f"fast_dev_run={fast!r} must be True/False or an int number of batches >= 0.")
    reload = args["reload_dataloaders_every_n_epochs"]
    if not _is_int(reload) or reload < 0:
        problems.append(f"reload_dataloaders_every_n_epochs={reload!r} must be an int >= 0.")
    if args["deterministic"] not in (None, True, False, "warn"):
        problems.append(f"deterministic={args['deterministic']!r} must be True, False, 'warn' or None.")
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                 "overfit_batches"):
        check_limit(name, args[name], problems)
    return problems


def check_barebones(args: dict[str, Any], problems: list[str]) -> None:
    """``barebones=True`` turns off everything that costs time per step; asking for one of them is an error."""
    for name in ("enable_checkpointing", "enable_progress_bar", "enable_model_summary", "logger", "profiler"):
        if args[name] not in (None, False):
            problems.append(f"barebones=True turns {name} off, but {name}={args[name]!r} was passed; drop one.")
    if args["detect_anomaly"]:
        problems.append("barebones=True and detect_anomaly=True contradict each other; drop one.")
    if args["log_every_n_steps"] is not None and args["log_every_n_steps"] != 50:
        problems.append("barebones=True turns logging off, but log_every_n_steps was passed; drop one.")


def env_seed() -> int:
    """The seed in ``ACCELKIT_SEED`` (0 when unset); a non-integer value is a clear error."""
    raw = os.environ.get("ACCELKIT_SEED", "0")
    try:
        return int(raw)
    except ValueError:
        raise ConfigurationError(f"ACCELKIT_SEED={raw!r} is not an integer seed") from None


def callback_list(callbacks: Any) -> list[Any]:
    """``callbacks=`` as a list of :class:`~accelkit.Callback` (one, a list, or ``None``)."""
    if callbacks is None:
        return []
    items = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    for item in items:
        if not isinstance(item, Callback):
            raise TypeError(f"callbacks must be accelkit.Callback instances, got {type(item).__name__}")
    return items


def logger_list(logger: Any, root: Path, manager: Any = None) -> list[Any]:
    """``logger=`` as a list: ``True``/``None`` a CSV logger under ``root``, ``False`` none, loggers as given; a
    name (``"tensorboard"``, ``"csv"``, a plugin's ``"mlflow"``), alone or in a list, is the registered logger
    built with ``save_dir=root`` (:mod:`accelkit.loggers.registry`; ``manager`` is the run's plugin manager, a
    fresh one when omitted)."""
    from accelkit.loggers import CSVLogger

    if logger is None or logger is True:
        return [CSVLogger(root)]
    if logger is False:
        return []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    if any(isinstance(item, str) for item in items):
        from accelkit.loggers.registry import build_logger

        if manager is None:
            from accelkit.plugins import PluginManager

            manager = PluginManager()
        items = [build_logger(item, root, manager) if isinstance(item, str) else item for item in items]
    for item in items:
        if not callable(getattr(item, "log_metrics", None)):
            raise TypeError(f"logger={item!r} is not a logger (it has no log_metrics method); pass an "
                            "accelkit.loggers.Logger, a registered logger name, a list of them, True or False")
    return items


def split_datamodule(loaders: Any, datamodule: Any, name: str) -> tuple[Any, Any]:
    """``(loaders, datamodule)`` from ``fit(model, dm)``-style calls, where a DataModule may come first."""
    from accelkit.datamodule import DataModule

    if isinstance(loaders, DataModule):
        if datamodule is not None:
            raise ValueError(f"a DataModule was passed both as {name} and as datamodule=; pass it once")
        return None, loaders
    if datamodule is not None and loaders is not None:
        raise ValueError(f"pass either {name} or datamodule=, not both")
    if datamodule is not None and not isinstance(datamodule, DataModule):
        raise TypeError(f"datamodule must be an accelkit.DataModule, got {type(datamodule).__name__}")
    return loaders, datamodule


def parse_max_time(value: Any) -> float | None:
    """``max_time`` as seconds: a ``"DD:HH:MM:SS"`` string, a ``timedelta``, a dict of ``timedelta`` arguments,
    or ``None``."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, dict):
        seconds = datetime.timedelta(**value).total_seconds()
    elif isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"max_time={value!r} must be 'DD:HH:MM:SS' (e.g. '00:12:00:00'), a timedelta or a dict")
        days, hours, minutes, secs = (int(p) for p in parts)
        seconds = datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=secs).total_seconds()
    else:
        raise ValueError(f"max_time={value!r} must be 'DD:HH:MM:SS', a datetime.timedelta or a dict")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"max_time={value!r} must be a positive duration")
    return seconds
