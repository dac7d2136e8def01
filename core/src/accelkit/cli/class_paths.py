"""Class paths in configurations: Lightning's names mapped to accelkit's, and ``file.py:Class`` targets.

A YAML file written for ``LightningCLI`` names classes such as ``lightning.pytorch.callbacks.ModelCheckpoint``.
:func:`translate_value` rewrites every such class path of a loaded configuration (the values of ``class_path`` keys,
and of hydra-style ``_target_`` keys) to the accelkit class of the same job, and refuses a Lightning class accelkit
has no counterpart for, naming what accelkit offers instead. It works on the YAML's data, not on its text: comments,
keys and other strings are left as they are. Importing this module imports neither jsonargparse nor Lightning.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import TypeGuard, overload

from accelkit.errors import ConfigurationError
from accelkit.utilities.file_modules import import_file

#: Lightning's package prefixes, newest first (``lightning.pytorch`` and the older ``pytorch_lightning``).
LIGHTNING_PREFIXES = ("lightning.pytorch.", "pytorch_lightning.")

#: Lightning name (without the package prefix) -> accelkit class path. Lightning re-exports classes from
#: several modules (``callbacks.ModelCheckpoint`` and ``callbacks.model_checkpoint.ModelCheckpoint``), so a
#: name is looked up by its sub-package and class name (see :func:`accelkit_class_path`).
LIGHTNING_CLASSES: dict[str, str] = {
    "LightningModule": "accelkit.Module",
    "LightningDataModule": "accelkit.DataModule",
    "Trainer": "accelkit.Trainer",
    "callbacks.Callback": "accelkit.callbacks.Callback",
    "callbacks.Checkpoint": "accelkit.callbacks.Checkpoint",
    "callbacks.ModelCheckpoint": "accelkit.callbacks.ModelCheckpoint",
    "callbacks.EarlyStopping": "accelkit.callbacks.EarlyStopping",
    "callbacks.LearningRateMonitor": "accelkit.callbacks.LearningRateMonitor",
    "callbacks.DeviceStatsMonitor": "accelkit.callbacks.DeviceStatsMonitor",
    "loggers.Logger": "accelkit.loggers.Logger",
    "loggers.CSVLogger": "accelkit.loggers.CSVLogger",
    "loggers.TensorBoardLogger": "accelkit.loggers.TensorBoardLogger",
    "loggers.MLFlowLogger": "accelkit_mlflow.MLFlowLogger",
    "loggers.WandbLogger": "accelkit_wandb.WandbLogger",
    "profilers.Profiler": "accelkit.profilers.Profiler",
    "profilers.SimpleProfiler": "accelkit.profilers.SimpleProfiler",
    "profilers.PyTorchProfiler": "accelkit.profilers.PyTorchProfiler",
    "cli.ReduceLROnPlateau": "accelkit.cli.ReduceLROnPlateau",
    "cli.SaveConfigCallback": "accelkit.cli.SaveConfigCallback",
    "cli.LightningCLI": "accelkit.cli.CLI",
}

#: Distributions that provide an accelkit class named above, for the message when it is not installed.
_DISTRIBUTIONS = {"accelkit_mlflow": "accelkit-mlflow", "accelkit_wandb": "accelkit-wandb"}

#: module name -> file, for each module :func:`load_class` imported from a file (``examples/digits.py:Net`` is
#: module ``digits``); a saved configuration names such classes by their file (see
#: :func:`accelkit.cli.saved_config.file_form_class_paths`).
FILE_MODULES: dict[str, Path] = {}

_PATH = re.compile(r"(?<![\w.])(?:lightning\.pytorch|pytorch_lightning)(?:\.[A-Za-z_]\w*)+")

#: the keys whose value is a class path to translate: jsonargparse's, and hydra's ``_target_``
CLASS_PATH_KEYS = ("class_path", "_target_")


def _key(path: str) -> tuple[str, str]:
    """``("callbacks", "ModelCheckpoint")`` for any of Lightning's spellings of that class."""
    for prefix in LIGHTNING_PREFIXES:
        if path.startswith(prefix):
            path = path[len(prefix):]
            break
    parts = path.split(".")
    return (parts[0] if len(parts) > 1 else ""), parts[-1]


_BY_KEY = {_key(name): target for name, target in LIGHTNING_CLASSES.items()}


def is_lightning_path(value: object) -> TypeGuard[str]:
    """Whether ``value`` is a dotted path under one of :data:`LIGHTNING_PREFIXES` (a whole string, nothing else)."""
    return isinstance(value, str) and _PATH.fullmatch(value) is not None


def _mirror(lightning_path: str, group: str, name: str) -> str | None:
    """The accelkit class at Lightning's path under the mechanical rule ``lightning.pytorch.X -> accelkit.X``, or at
    ``accelkit.<group>.<Name>`` (Lightning's ``callbacks.model_summary.ModelSummary`` is
    ``accelkit.callbacks.ModelSummary``); only accelkit's own modules are imported to look."""
    rest = lightning_path.split(".", 2)[2] if lightning_path.startswith("lightning.") else \
        lightning_path.split(".", 1)[1]
    for candidate in dict.fromkeys([f"accelkit.{rest}", f"accelkit.{group}.{name}" if group else ""]):
        module_name, _, attribute = candidate.rpartition(".")
        if not module_name.startswith("accelkit"):
            continue
        try:
            found = getattr(importlib.import_module(module_name), attribute, None)
        except ImportError:
            continue
        if isinstance(found, type):
            return candidate
    return None


def _offered(group: str) -> list[str]:
    """The class paths accelkit offers in a sub-package (``callbacks``...): :data:`LIGHTNING_CLASSES`' and the
    classes ``accelkit.<group>`` exports, one per class name."""
    offered = {t.rsplit(".", 1)[1]: t for (g, _), t in _BY_KEY.items() if g == group}
    try:
        module = importlib.import_module(f"accelkit.{group}") if group.isidentifier() else None
    except ImportError:
        module = None
    for name in getattr(module, "__all__", []):
        if isinstance(getattr(module, name, None), type):
            offered.setdefault(name, f"accelkit.{group}.{name}")
    return sorted(offered.values())


def accelkit_class_path(lightning_path: str) -> str:
    """The accelkit class path standing for a Lightning class path: the one :data:`LIGHTNING_CLASSES` names, else
    the accelkit class at the same path with ``accelkit`` for ``lightning.pytorch`` (or in the same sub-package).

    :param lightning_path: e.g. ``"lightning.pytorch.callbacks.early_stopping.EarlyStopping"``.
    :raise ConfigurationError: when accelkit has no such class; the message names the classes it has in the same
        group (callbacks, loggers ...).
    """
    group, name = _key(lightning_path)
    target = _BY_KEY.get((group, name)) or _BY_KEY.get(("", name)) or _mirror(lightning_path, group, name)
    if target is None:
        same_group = _offered(group) or sorted(set(_BY_KEY.values()))
        import difflib

        names = {t.rsplit(".", 1)[1].lower(): t.rsplit(".", 1)[1] for t in same_group}
        close = difflib.get_close_matches(name.lower(), list(names), n=1, cutoff=0.6)
        hint = f" Did you mean {names[close[0]]!r}?" if close else ""
        raise ConfigurationError(f"{lightning_path!r} has no accelkit counterpart.{hint} accelkit provides "
                                 f"{', '.join(same_group)}; write one of those class paths (or your own class) "
                                 "in the configuration")
    module = target.split(".", 1)[0]
    if module in _DISTRIBUTIONS:
        import importlib.util

        if importlib.util.find_spec(module) is None:
            raise ConfigurationError(f"{lightning_path!r} maps to {target}, which the {_DISTRIBUTIONS[module]} "
                                     f"distribution provides; install it: pip install {_DISTRIBUTIONS[module]}")
    return target


@overload
def translate_value(value: str) -> str: ...


@overload
def translate_value(value: object) -> object: ...


def translate_value(value: object) -> object:
    """A loaded configuration with the Lightning class path of every ``class_path`` (or ``_target_``) key replaced
    by its accelkit counterpart (see :func:`accelkit_class_path`), in nested dicts and lists. A string that is a
    whole Lightning class path elsewhere (``--trainer.logger lightning.pytorch.loggers.CSVLogger``) is replaced when
    accelkit has the class and left alone otherwise; other keys and strings are left as they are."""
    if isinstance(value, dict):
        return {key: (accelkit_class_path(item) if key in CLASS_PATH_KEYS and is_lightning_path(item)
                      else translate_value(item)) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(translate_value(item) for item in value)
    if is_lightning_path(value):
        try:
            return accelkit_class_path(value)
        except ConfigurationError:
            return value
    return value


def translate_word(word: str) -> str:
    """A command-line word with a Lightning class path given as the whole word or as the whole value of
    ``--key=value`` replaced (see :func:`translate_value`); values in YAML or JSON form are translated when the
    configuration loader reads them."""
    option, equals, given = word.partition("=")
    if equals and option.startswith("-"):
        return f"{option}={translate_value(given)}"
    return translate_value(word)


def load_class(target: str, base: type, kind: str) -> type:
    """Import ``path/to/file.py:ClassName`` or ``package.module:ClassName`` and check it subclasses ``base``.

    A file is imported under its own stem (:func:`accelkit.utilities.file_modules.import_file`: only that name
    finds that file, in this process and in the workers it starts; ``sys.path`` is the same after).

    :param kind: how ``base`` is named in messages (``"accelkit.Module"``).
    :raise SystemExit: with a message naming the bad part and the classes the module has.
    """
    location, sep, class_name = target.rpartition(":")
    if not sep or not location or not class_name:
        raise SystemExit(f"accelkit: {target!r} is not of the form path/to/file.py:ClassName or package.module:Class")
    is_file = is_file_location(location)
    if is_file:
        path = Path(location).resolve()
        if not path.is_file():
            raise SystemExit(f"accelkit: no such file: {location}")
        module_name = path.stem
    else:
        module_name = location
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as `python -m` would: modules in the current folder import
    try:
        module = import_file(path) if is_file else importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.split(".")[0] != exc.name.split(".")[0]:
            raise  # the module exists but imports something missing: the traceback is the useful answer
        raise SystemExit(f"accelkit: cannot import {module_name!r} ({exc}); give a file path "
                         "(path/to/file.py:Class) or a module importable from the current folder") from None
    except ImportError as exc:
        if not is_file or exc.name != module_name:
            raise
        raise SystemExit(f"accelkit: {exc}") from None
    if is_file:
        FILE_MODULES[module_name] = path
    else:  # named by its module path this time (a later command of the same process): saved by that path
        FILE_MODULES.pop(module_name, None)
    names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, base)
                   and v is not base)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise SystemExit(f"accelkit: {module_name} has no {class_name!r}; {kind} classes found there: "
                         f"{', '.join(names) or 'none'}")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise SystemExit(f"accelkit: {module_name}:{class_name} is a {type(cls).__name__}, not an {kind} "
                         f"subclass; {kind} classes found there: {', '.join(names) or 'none'}")
    return cls


def is_file_location(location: str) -> bool:
    """Whether the part before ``:`` of a target names a file (``lib/nets.py``), not a module (``lib.nets``)."""
    return location.endswith(".py") or "/" in location or "\\" in location


def dotted_class_path(target: str, base: type, kind: str) -> str:
    """``path/to/file.py:Class`` or ``package.module:Class`` as the dotted path a configuration uses
    (``file.Class``), importing it (see :func:`load_class`); a target without ``:`` is returned unchanged."""
    if ":" not in target:
        return target
    cls = load_class(target, base, kind)
    return f"{cls.__module__}.{cls.__qualname__}"
