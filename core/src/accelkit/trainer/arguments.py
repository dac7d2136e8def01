"""Checking and normalising the Trainer's run-control arguments (everything but the composition strings)."""

from __future__ import annotations

import datetime
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, cast

from accelkit.callbacks.base import Callback, callback_list  # noqa: F401 - callback_list: the Trainer's argument
from accelkit.errors import ConfigurationError
from accelkit.loops.captured import compile_options

if TYPE_CHECKING:
    from accelkit.accelerator import Accelerator
    from accelkit.loggers.base import Logger
    from accelkit.module.datamodule import DataModule
    from accelkit.plugins.compose import Composition
    from accelkit.plugins.manager import PluginManager

#: the loaders a stage was given (whatever iterable of batches, or a list or dict of them)
LoadersT = TypeVar("LoadersT")

#: arguments of Lightning's Trainer that only make sense with Lightning AI's own services
CLOUD_ONLY = {
    "model_registry": "model_registry uploads checkpoints to Lightning AI's cloud model registry, a Lightning "
                      "service that accelkit does not talk to; remove the argument (checkpoints are written under "
                      "default_root_dir, or where your ModelCheckpoint says)",
}


def _is_int(value: object) -> TypeGuard[numbers.Integral]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_limit(name: str, value: object, problems: list[str]) -> None:
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


def check_run_arguments(args: Mapping[str, object]) -> list[str]:
    """Every problem with the run-control arguments, each a sentence naming the value and what works."""
    problems: list[str] = []
    max_epochs = args["max_epochs"]
    if max_epochs is not None and (not _is_int(max_epochs) or max_epochs < -1):
        problems.append(f"max_epochs={max_epochs!r} must be an int >= 0, -1 for no limit, or None.")
    if not _is_int(args["max_steps"]) or args["max_steps"] < -1:
        problems.append(f"max_steps={args['max_steps']!r} must be an int >= 0, or -1 for no limit.")
    for name in ("min_epochs", "min_steps"):
        minimum = args[name]
        if minimum is not None and (not _is_int(minimum) or minimum < 0):
            problems.append(f"{name}={minimum!r} must be an int >= 0 or None.")
    if not _is_int(args["accumulate_grad_batches"]) or args["accumulate_grad_batches"] < 1:
        problems.append(f"accumulate_grad_batches={args['accumulate_grad_batches']!r} must be an int >= 1.")
    if args["gradient_clip_algorithm"] not in (None, "norm", "value"):
        problems.append(f"gradient_clip_algorithm={args['gradient_clip_algorithm']!r} must be 'norm' or 'value'.")
    clip = args["gradient_clip_val"]
    if clip is not None and (not isinstance(clip, (int, float, numbers.Real)) or isinstance(clip, bool)
                             or not float(clip) >= 0):
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
    if not (isinstance(fast, bool) or (_is_int(fast) and int(fast) >= 0)):
        problems.append(f"fast_dev_run={fast!r} must be True/False or an int number of batches >= 0.")
    reload = args["reload_dataloaders_every_n_epochs"]
    if not _is_int(reload) or reload < 0:
        problems.append(f"reload_dataloaders_every_n_epochs={reload!r} must be an int >= 0.")
    deterministic = args["deterministic"]
    if not (deterministic is None or isinstance(deterministic, bool) or
            (isinstance(deterministic, str) and deterministic == "warn")):
        problems.append(f"deterministic={args['deterministic']!r} must be True, False, 'warn' or None.")
    for name in ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches",
                 "overfit_batches"):
        check_limit(name, args[name], problems)
    try:
        compile_options(args.get("compile_step"))
    except (TypeError, ValueError) as exc:
        problems.append(str(exc))
    return problems


def check_barebones(args: Mapping[str, object], problems: list[str]) -> None:
    """``barebones=True`` turns off everything that costs time per step; asking for one of them is an error."""
    for name in ("enable_checkpointing", "enable_progress_bar", "enable_model_summary", "logger", "profiler"):
        if args[name] not in (None, False):
            problems.append(f"barebones=True turns {name} off, but {name}={args[name]!r} was passed; drop one.")
    if args["detect_anomaly"]:
        problems.append("barebones=True and detect_anomaly=True contradict each other; drop one.")
    if args["log_every_n_steps"] is not None and args["log_every_n_steps"] != 50:
        problems.append("barebones=True turns logging off, but log_every_n_steps was passed; drop one.")


def logger_list(logger: object, root: Path, manager: PluginManager | None = None) -> list[Logger]:
    """``logger=`` as a list: ``True``/``None`` the default logger under ``root``
    (:func:`accelkit.loggers.default_logger`), ``False`` none, loggers as given; a
    name (``"tensorboard"``, ``"csv"``, a plugin's ``"mlflow"``), alone or in a list, is the registered logger
    built with ``save_dir=root`` (:func:`accelkit.plugins.compose.build_logger`; ``manager`` is the run's plugin
    manager, a fresh one when omitted)."""
    from accelkit.loggers import default_logger

    if logger is None or logger is True:
        return [default_logger(root)]
    if logger is False:
        return []
    items = list(logger) if isinstance(logger, (list, tuple)) else [logger]
    if any(isinstance(item, str) for item in items):
        from accelkit.plugins.compose import build_logger

        if manager is None:
            from accelkit.plugins.manager import PluginManager

            manager = PluginManager()
        items = [build_logger(item, root, manager) if isinstance(item, str) else item for item in items]
    for item in items:
        if not callable(getattr(item, "log_metrics", None)):
            raise TypeError(f"logger={item!r} is not a logger (it has no log_metrics method); pass an "
                            "accelkit.loggers.Logger, a registered logger name, a list of them, True or False")
    return cast("list[Logger]", items)  # each item was just checked to have Logger's log_metrics


def split_datamodule(loaders: LoadersT | DataModule | None, datamodule: object,
                     name: str) -> tuple[LoadersT | None, DataModule | None]:
    """``(loaders, datamodule)`` from ``fit(model, dm)``-style calls, where a DataModule may come first."""
    from accelkit.module.datamodule import DataModule

    if isinstance(loaders, DataModule):
        if datamodule is not None:
            raise ValueError(f"a DataModule was passed both as {name} and as datamodule=; pass it once")
        return None, loaders
    if datamodule is not None and loaders is not None:
        raise ValueError(f"pass either {name} or datamodule=, not both")
    if datamodule is not None and not isinstance(datamodule, DataModule):
        raise TypeError(f"datamodule must be an accelkit.DataModule, got {type(datamodule).__name__}")
    return loaders, datamodule


def parse_max_time(value: object) -> float | None:
    """``max_time`` as seconds: a ``"DD:HH:MM:SS"`` string, a ``timedelta``, a dict of ``timedelta`` arguments,
    or ``None``."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, dict):
        seconds = _timedelta(value, value).total_seconds()
    elif isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4 or not all(p.strip().isascii() and p.strip().isdigit() for p in parts):
            raise ValueError(f"max_time={value!r} must be 'DD:HH:MM:SS' (e.g. '00:12:00:00'), a timedelta or a dict")
        days, hours, minutes, secs = (int(p) for p in parts)
        seconds = _timedelta(dict(days=days, hours=hours, minutes=minutes, seconds=secs), value).total_seconds()
    else:
        raise ValueError(f"max_time={value!r} must be 'DD:HH:MM:SS', a datetime.timedelta or a dict")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"max_time={value!r} must be a positive duration")
    return seconds


#: the keyword arguments of ``datetime.timedelta``, the keys a ``max_time`` dict may have
TIMEDELTA_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")


def _timedelta(parts: Mapping[str, float], value: object) -> datetime.timedelta:
    """``timedelta(**parts)`` for ``max_time=value``, refusing (``ValueError`` naming it) a key timedelta does not
    take, a part that is not a finite number, and a duration longer than timedelta holds."""
    unknown = [key for key in parts if key not in TIMEDELTA_KEYS]
    if unknown:
        raise ValueError(f"max_time={value!r} has key(s) {', '.join(map(repr, unknown))} that timedelta does not "
                         f"take; use {', '.join(TIMEDELTA_KEYS)} (e.g. {{'hours': 1, 'minutes': 30}})")
    for key, part in parts.items():
        if not isinstance(part, numbers.Real) or isinstance(part, bool) or not math.isfinite(part):
            raise ValueError(f"max_time={value!r}: its part {key}={part!r} is not a number; each part must be "
                             "an int or a finite float (e.g. {'minutes': 1.5})")
    try:
        return datetime.timedelta(**parts)
    except OverflowError:
        raise ValueError(f"max_time={value!r} is longer than a datetime.timedelta holds "
                         f"({datetime.timedelta.max.days} days); pass a shorter duration or None") from None


# ----------------------------------------------------------------------------------------------- plugins, devices
def plugin_arguments(plugins: object) -> tuple[list[str], list[str], list[object]]:
    """``plugins=`` as ``(blocked names, strategy/precision names, objects)``; anything else is refused naming it.

    Accepted: ``None``, one item or a list/tuple of: ``"no:NAME"`` (block an installed plugin), a strategy or
    precision name, a :class:`~accelkit.strategies.base.Strategy` or :class:`~accelkit.precision.Precision` instance,
    a :class:`~accelkit.environments.base.ClusterEnvironment` instance (used instead of detection), or a plugin (a
    module or object carrying ``@accelkit.hookimpl`` functions).
    """
    from accelkit.environments.base import ClusterEnvironment
    from accelkit.precision import Precision
    from accelkit.strategies.base import Strategy

    items = plugins if isinstance(plugins, (list, tuple)) else ([] if plugins is None else [plugins])
    works = ("plugins= takes a list of plugin modules/objects (with @accelkit.hookimpl functions), strategy or "
             "precision names or instances, and 'no:NAME' to block an installed plugin")
    problems: list[str] = []
    for item in items:
        if isinstance(item, str):
            if not item.strip() or item.strip() == "no:":
                problems.append(f"plugins item {item!r} is an empty name; {works}.")
        elif isinstance(item, type) and issubclass(item, (Strategy, Precision)):
            problems.append(f"plugins item {item.__name__} is a class; pass an instance "
                            f"({item.__name__}(...)) or its registered name.")
        elif not isinstance(item, (Strategy, Precision, ClusterEnvironment)) and not _looks_like_plugin(item):
            problems.append(f"plugins item {item!r} ({type(item).__name__}) is not a plugin; {works}.")
    if problems:
        raise ConfigurationError(problems)
    blocked = [p.strip()[3:] for p in items if isinstance(p, str) and p.strip().startswith("no:")]
    names = [p for p in items if isinstance(p, str) and not p.strip().startswith("no:")]
    return blocked, names, [p for p in items if not isinstance(p, str)]


def _looks_like_plugin(item: object) -> bool:
    """A module, or an object with an ``ACCELKIT_API`` declaration or an ``accelkit_*`` attribute."""
    import types

    if isinstance(item, types.ModuleType):
        return True
    if item is None or isinstance(item, (numbers.Number, bytes, bytearray, list, tuple, dict, set)):
        return False
    return hasattr(item, "ACCELKIT_API") or any(n.startswith("accelkit_") for n in dir(item))


#: more processes than any one machine runs, whatever its device count (each is a Python process)
MAX_DEVICES_PER_NODE = 256


def check_device_count(devices: object, accelerator: object, manager: PluginManager) -> str | None:
    """A problem when ``devices`` (an int or a digit string) asks for more processes than is sane here: over
    ``max(256, 8 x device_count)`` of the named accelerator (asked through its class, starting no runtime).
    ``None`` when it is fine or not a count (the accelerator parses the rest)."""
    from accelkit.accelerator import Accelerator
    from accelkit.records import lookup_key

    cls: Accelerator | type[Accelerator] | None = None
    if isinstance(accelerator, Accelerator) or (isinstance(accelerator, type) and issubclass(accelerator, Accelerator)):
        cls = accelerator
    elif isinstance(accelerator, str) and lookup_key(accelerator) != "auto":
        try:
            record = manager.registry.accelerators.get(lookup_key(accelerator))
            # (an accelerator record names an Accelerator class)
            cls = cast("type[Accelerator]", record.load()) if record is not None else None
        except Exception:  # noqa: BLE001 - the resolver reports unknown or broken accelerators itself
            cls = None
    try:
        device_count = int(cls.device_count()) if cls is not None and cls.is_available() else None
    except Exception:  # noqa: BLE001 - as above
        device_count = None
    accelerator = getattr(cls, "name", None) or str(accelerator)
    count = devices
    if isinstance(devices, str) and devices.strip().isascii() and devices.strip().isdigit():
        count = int(devices.strip())
    if not _is_int(count):
        return None
    limit = max(MAX_DEVICES_PER_NODE, 8 * (device_count or 1))
    if count <= limit:
        return None
    here = f"{accelerator!r} has {device_count} device(s) here" if device_count else f"{accelerator!r} is asked"
    return (f"devices={devices!r} would start {count} processes on this node, but {here}; accelkit refuses more "
            f"than {limit} (max({MAX_DEVICES_PER_NODE}, 8 per device)). Use devices='auto', -1 (every device) or "
            f"an int up to {device_count or limit}.")


# ----------------------------------------------------------------------------------------------- where runs write
def check_root_dir(root: Path) -> str | None:
    """A problem when ``root`` (``default_root_dir``) cannot be written: the nearest existing folder on its path
    must be a folder this process may write into. Found when the Trainer is built, not after the first epoch."""
    probe = Path(os.path.abspath(root))
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return (f"default_root_dir={str(root)!r} cannot be created: {str(probe)!r} is a file, not a folder. Pass a "
                "folder path (logs and checkpoints go under it).")
    if not os.access(probe, os.W_OK | os.X_OK):
        return (f"default_root_dir={str(root)!r} is not writable: this process may not write into {str(probe)!r} "
                "(permissions or a read-only file system). Pass a folder you can write to, or turn logging and "
                "checkpointing off (logger=False, enable_checkpointing=False).")
    return None


# ----------------------------------------------------------------------------------------------- loaders
def check_loaders(stage: str, loaders: Mapping[str, object]) -> None:
    """Refuse, before anything starts, a loader argument that cannot be one: not iterable, a string, or a
    map-style ``Dataset`` (which yields single samples, not batches). Lists/tuples/dicts of loaders are checked
    item by item. Names the argument and the value."""
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    arguments = {"train": "train_dataloaders", "val": "val_dataloaders"} if stage == "fit" else {}
    for key, value in loaders.items():
        if value is None:
            continue
        argument = arguments.get(key, "dataloaders")
        items = list(value.items()) if isinstance(value, dict) else (
            list(enumerate(value)) if isinstance(value, (list, tuple)) else [(None, value)])
        for index, item in items:
            where = argument if index is None else f"{argument}[{index!r}]"
            if isinstance(item, DataLoader):
                continue
            problem = None
            if isinstance(item, (str, bytes)) or item is None:
                problem = f"is {item!r}, not a loader"
            elif isinstance(item, Dataset) and not isinstance(item, IterableDataset):
                problem = (f"is a {type(item).__name__} (a map-style Dataset: iterating it gives single samples, "
                           f"not batches); wrap it: DataLoader(dataset, batch_size=...)")
            else:
                try:
                    iter(cast("Iterable[object]", item))  # the runtime test of iterability: TypeError below
                except TypeError:
                    problem = f"is a {type(item).__name__} ({item!r:.80}), which is not iterable"
            if problem is not None:
                raise TypeError(f"{stage}(): {where} {problem}. Pass a torch.utils.data.DataLoader (or any iterable of "
                                "batches), a list/dict of them, or a DataModule.")


def parse_collective_timeout(value: object) -> float:
    """``Trainer(collective_timeout=...)`` in seconds: a positive number or a ``timedelta``."""
    from datetime import timedelta

    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 or seconds != seconds:
        raise ConfigurationError(f"collective_timeout={value!r} must be a positive number of seconds or a timedelta "
                                 "(default 600: ten minutes)")
    return float(seconds)


def compose_arguments(manager: PluginManager, arguments: dict[str, Any], plugin_names: list[str],
                      plugin_objects: list[object], problems: list[str], front: Callable[..., object]) -> Composition:
    """The one composition of a run from a front end's arguments (the Trainer's and the Fabric's): plugins
    translate ``arguments`` (``accelerator``, ``devices``, ``strategy``, ``precision``, ``num_nodes``, and ``extra``:
    keyword arguments the front does not know, refused with ``front``'s signature when no plugin takes them), the
    device count is checked, and :func:`~accelkit.plugins.compose.compose` resolves the parts. ``problems`` found
    by the front's own checks are reported in the same :class:`ConfigurationError`; its notices are printed.

    :param front: the front end's ``__init__`` (named in the error for an unknown keyword argument).
    """
    from accelkit.plugins.compose import compose, print_notices
    from accelkit.trainer.removed_arguments import removed_argument_message

    manager.hook.accelkit_translate_arguments(arguments=arguments)
    if arguments["extra"]:
        raise TypeError(removed_argument_message(arguments["extra"], front))
    too_many = check_device_count(arguments["devices"], arguments["accelerator"], manager)
    if too_many:
        raise ConfigurationError(problems + [too_many])  # the accelerator would try to build the list
    try:
        composition = compose(manager, accelerator=arguments["accelerator"], devices=arguments["devices"],
                              strategy=arguments["strategy"], precision=arguments["precision"],
                              num_nodes=arguments["num_nodes"], plugin_names=plugin_names,
                              plugin_objects=plugin_objects)
    except ConfigurationError as exc:
        raise ConfigurationError(problems + exc.problems) from None
    if problems:
        raise ConfigurationError(problems)
    print_notices(composition.notices)
    return composition
