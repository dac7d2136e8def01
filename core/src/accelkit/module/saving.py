"""Hyper-parameters as plain data, in and out of checkpoints (the storage side of :mod:`accelkit.module.hparams`).

:func:`~accelkit.module.hparams.plain_hparams` keeps only what ``torch.load(weights_only=True)`` reads back, so
:func:`~accelkit.module.hparams.load_from_checkpoint` never unpickles objects from a file. The public names are
re-exported by
:mod:`accelkit.module.hparams`; import them from there.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import io
import os
import sys
import types
import warnings
from argparse import Namespace
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
from torch import nn

from accelkit.module.references import (
    REFERENCE_KEY,
    REFERENCE_TYPES,
    Unresolved,
    first_unresolved,
    reference_to,
    resolve_references,
)
from accelkit.utilities.bounded import check_expanded_size, load_yaml
from accelkit.utilities.parsing import AttributeDict

if TYPE_CHECKING:
    from torch.serialization import MAP_LOCATION

    from accelkit.module.datamodule import DataModule
    from accelkit.module.hparams import HyperparametersMixin

__all__ = ["checkpoint_entries", "hparams_to_log", "load_from_checkpoint", "load_hparams_file", "plain_hparams",
           "save_hparams_to_yaml"]

# ------------------------------------------------------------------------------------------------ plain data
#: where a checkpoint keeps the hyper-parameters, and the name they were saved under
HPARAMS_KEY = "hyper_parameters"
HPARAMS_NAME_KEY = "hparams_name"

_DROP = object()
_WEIGHTS_ONLY: dict[type, bool] = {}
_T = TypeVar("_T")


class StateLoader(Protocol):
    """An object whose state a checkpoint restores: a :class:`~accelkit.DataModule`, or any class with its
    ``load_state_dict``."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def _weights_only_accepts(value: object) -> bool:
    """Whether this torch's ``torch.load(weights_only=True)`` reads values of ``value``'s type back."""
    kind = type(value)
    if kind not in _WEIGHTS_ONLY:
        buffer = io.BytesIO()
        try:
            torch.save(value, buffer)
            buffer.seek(0)
            torch.load(buffer, weights_only=True)
            _WEIGHTS_ONLY[kind] = True
        except Exception:
            _WEIGHTS_ONLY[kind] = False
    return _WEIGHTS_ONLY[kind]


def _dropped(path: str, value: object) -> object:
    what = "a class" if isinstance(value, type) else type(value).__name__
    key = path.split(".")[0].split("[")[0]
    why = "is not plain data"
    if isinstance(value, REFERENCE_TYPES):  # a class or function that cannot be found again by its name
        why = (f"cannot be stored by reference ({getattr(value, '__qualname__', value)!r} is defined inside a "
               "function, a lambda, or not what its module holds under that name)")
    warnings.warn(f"hyper-parameter {path!r} ({what}) {why}, so it is not stored in checkpoints; "
                  f"pass it again when loading: load_from_checkpoint(path, {key}=...)", UserWarning, stacklevel=4)
    return _DROP


def _plain(value: object, path: str) -> object:
    kind = type(value)
    if value is None or kind in (bool, int, float, str, bytes):
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, path)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, (numpy.generic, numpy.ndarray)):
        return _plain(value.item() if isinstance(value, numpy.generic) else value.tolist(), path)
    reference = reference_to(value)  # a class or function: by reference, resolved on load from imported modules
    if reference is not None:
        return {REFERENCE_KEY: reference}
    if isinstance(value, (nn.Module, type, types.FunctionType, types.MethodType, types.ModuleType,
                          types.BuiltinFunctionType)):
        return _dropped(path, value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (torch.dtype, torch.device, torch.Size, complex)):
        return value if _weights_only_accepts(value) else _dropped(path, value)
    if isinstance(value, (bool, int, float, str, bytes)):  # subclasses of the plain types
        # the first plain type value is an instance of, called on value: never bytes(float) and the like
        return next(base for base in (bool, int, float, str, bytes) if isinstance(value, base))(value)  # type: ignore[arg-type]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Namespace):
        value = vars(value)
    elif dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            key = _plain(key, f"{path}.<key>") if not isinstance(key, (str, int)) else key
            plain = _plain(item, f"{path}.{key}")
            if plain is not _DROP and key is not _DROP:
                out[key] = plain
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if any(item is _DROP for item in items):
            return _DROP
        if isinstance(value, (set, frozenset)):
            return set(items) if _weights_only_accepts(set()) else items
        return list(items) if isinstance(value, list) else tuple(items)
    return value if _weights_only_accepts(value) else _dropped(path, value)


def plain_hparams(hparams: Mapping[str, object] | Namespace, warned: Collection[str] = ()) -> dict[str, object]:
    """A copy of ``hparams`` holding only data that ``torch.load(weights_only=True)`` reads back.

    ``pathlib.Path`` becomes ``str``, NumPy scalars Python numbers, NumPy arrays lists, ``Namespace``,
    :class:`AttributeDict` and dataclass instances ``dict``, enum members their value, tensors CPU tensors; tuples
    stay tuples, a class or function its module holds by name the reference ``{"__reference__": "module:qualname"}``
    (:mod:`accelkit.module.references`). A value that cannot be converted (an ``nn.Module``, a class defined inside
    a function, a lambda, an arbitrary object) is left out with a warning naming its key: pass it again as a keyword
    of :func:`~accelkit.module.hparams.load_from_checkpoint`.

    :param warned: keys whose ``nn.Module`` values are left out without that warning (``save_hyperparameters``
        already warned about them, as Lightning's does, once).
    """
    source = vars(hparams) if isinstance(hparams, Namespace) else hparams
    plain = {key: _DROP if key in warned and isinstance(value, nn.Module) else _plain(value, str(key))
             for key, value in source.items()}
    return {key: value for key, value in plain.items() if value is not _DROP}


def _attribute_access(value: object) -> object:
    """Mappings (at any depth) become :class:`AttributeDict`, so a ``Namespace`` stored as a dict still answers
    ``args.lr`` after loading."""

    if isinstance(value, Mapping):
        return AttributeDict((key, _attribute_access(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_attribute_access(item) for item in value]
    return value


# ------------------------------------------------------------------------------------------------ checkpoints
def checkpoint_entries(module: object, datamodule: DataModule | None = None) -> dict[str, object]:
    """The entries a checkpoint gets from ``module`` and ``datamodule``: their hyper-parameters as plain data
    (under their ``CHECKPOINT_HYPER_PARAMS_KEY``, with ``CHECKPOINT_HYPER_PARAMS_NAME`` when they were passed as
    one ``__init__`` argument) and the datamodule's non-empty ``state_dict()`` under its class's qualified name."""
    entries: dict[str, object] = {}
    for obj in (module, datamodule):
        hparams = getattr(obj, "hparams", None) if obj is not None else None
        if hparams:
            initial = getattr(obj, "hparams_initial", None) or {}  # save_hyperparameters warned about its modules
            warned = [key for key, value in initial.items() if isinstance(value, nn.Module)]
            entries[getattr(obj, "CHECKPOINT_HYPER_PARAMS_KEY", "hyper_parameters")] = plain_hparams(hparams, warned)
            name = getattr(obj, "__dict__", {}).get("_hparams_name")
            if name:
                entries[getattr(obj, "CHECKPOINT_HYPER_PARAMS_NAME", "hparams_name")] = name
    if datamodule is not None:
        state = datamodule.state_dict()
        if state:
            entries[type(datamodule).__qualname__] = state
    return entries


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):  # (b's type is a's)
        return a is b or (a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu())))
    try:
        return bool(a == b)
    except Exception:
        return a is b


def hparams_to_log(module: HyperparametersMixin | None,
                   datamodule: HyperparametersMixin | None = None) -> dict[str, object] | None:
    """The hyper-parameters the loggers get at the start of a run: the initial ones of the module and of the
    datamodule that saved theirs with ``logger=True``, merged (``None`` when neither did).

    :raises RuntimeError: a key both saved with different values.
    """
    sources = [obj for obj in (module, datamodule) if obj is not None and getattr(obj, "_log_hyperparams", False)]
    if not sources:
        return None
    merged: dict[str, object] = {}
    for obj in sources:
        for key, value in obj.hparams_initial.items():
            if key in merged and not _same(merged[key], value):
                raise RuntimeError(f"hyper-parameter {key!r} is {merged[key]!r} in {type(module).__name__} and "
                                   f"{value!r} in {type(datamodule).__name__}; the loggers get one value per name")
            merged[key] = value
    return merged


def load_hparams_file(path: str | os.PathLike) -> dict[str, object]:
    """Read hyper-parameters from a YAML file (``.yaml``/``.yml``; needs PyYAML).

    :raises accelkit.utilities.bounded.DataBombError: the file stands for more values than
        :data:`~accelkit.utilities.bounded.MAX_VALUES` once its aliases are expanded (or nests too deep).
    """
    path = Path(path)
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise ValueError(f"hparams_file {str(path)!r}: only YAML files (.yaml, .yml) are read")
    try:
        import yaml  # noqa: F401  (load_yaml's dependency, named here by the file that needs it)
    except ImportError:
        raise ImportError(f"hparams_file {str(path)!r} needs PyYAML: pip install pyyaml") from None
    if not path.is_file():
        raise FileNotFoundError(f"hparams_file {str(path)!r} does not exist")
    data = load_yaml(path.read_text(), f"hparams_file {str(path)!r}") or {}
    if not isinstance(data, Mapping):
        raise ValueError(f"hparams_file {str(path)!r} holds a {type(data).__name__}, not a mapping of names to values")
    return dict(data)


def save_hparams_to_yaml(config_yaml: str | os.PathLike, hparams: Mapping[str, object]) -> None:
    """Write ``hparams`` to the YAML file ``config_yaml`` atomically (what
    :func:`~accelkit.module.hparams.load_hparams_file` and
    ``load_from_checkpoint(..., hparams_file=)`` read back, the loggers' ``hparams.yaml``); a value YAML cannot
    hold as plain data is written as its ``repr``."""
    import yaml

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the values plain_hparams drops are written as their repr below
        plain = plain_hparams(dict(hparams))
    data = {str(k): plain[k] if k in plain else repr(v) for k, v in hparams.items()}
    target = os.fspath(config_yaml)
    with open(target + ".tmp", "w") as handle:
        yaml.safe_dump(data, handle, sort_keys=True)
    os.replace(target + ".tmp", target)


def _read_checkpoint(source: str | os.PathLike | IO[bytes], map_location: MAP_LOCATION,
                     weights_only: bool) -> dict[str, Any]:
    """A checkpoint file or a sharded checkpoint's folder, read by the core's one reader
    (:func:`accelkit.checkpoint.files.load`, with its errors)."""
    from accelkit.checkpoint import files, layout, sharded

    if isinstance(source, (str, os.PathLike)) and sharded.is_sharded_checkpoint(source):
        checkpoint = sharded.load_full(source, weights_only=weights_only)  # any world size, on the CPU
        layout.check_version(checkpoint, repr(str(source)))
        return checkpoint if map_location is None else _move(checkpoint, map_location)
    if isinstance(source, (str, os.PathLike)):
        sharded.check_complete(source)  # part of a sharded checkpoint: the missing file is named
    checkpoint = files.load(source, weights_only=weights_only, map_location=map_location)
    layout.check_version(checkpoint, repr(str(getattr(source, "name", source))))
    return checkpoint


def _name(source: object) -> str:
    """A checkpoint source for messages: its path, or the name of an open file."""
    return repr(str(getattr(source, "name", source)))


def _move(checkpoint: dict[str, object], map_location: MAP_LOCATION) -> dict[str, Any]:
    """The tensors of a checkpoint read on the CPU, moved as ``torch.load(map_location=...)`` would have put them."""
    import io

    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    buffer.seek(0)
    return torch.load(buffer, map_location=map_location, weights_only=False)


def _init_kwargs(cls: type[Any], stored: dict[str, object], hparams_name: str | None,
                 overrides: dict[str, object]) -> dict[str, object]:

    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    kinds = inspect.Parameter
    names = [p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)]
    any_keyword = any(p.kind is kinds.VAR_KEYWORD for p in params)
    if hparams_name and hparams_name != "kwargs" and hparams_name in names:
        # saved from one __init__ argument (a dict or Namespace): overrides that are no argument go into it
        inner = {name: value for name, value in overrides.items() if name not in names}
        overrides = {name: value for name, value in overrides.items() if name in names}
        stored = {hparams_name: AttributeDict({**stored, **inner})}
    if not any_keyword:
        unknown = [name for name in overrides if name not in names]
        if unknown:
            warnings.warn(f"{cls.__name__}.load_from_checkpoint(): {unknown!r} are not arguments of "
                          f"{cls.__name__}.__init__ (it takes {names}), so they are not passed", UserWarning,
                          stacklevel=3)
        stored = {name: value for name, value in stored.items() if name in names}
        overrides = {name: value for name, value in overrides.items() if name in names}
    kwargs = {**stored, **overrides}
    missing = [p.name for p in params if p.default is kinds.empty
               and p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY) and p.name not in kwargs]
    missing += [p.name for p in params if p.kind is kinds.POSITIONAL_ONLY and p.default is kinds.empty]
    if missing:
        example = ", ".join(f"{name}=..." for name in missing)
        raise TypeError(f"{cls.__name__}.__init__ needs {missing!r}, which the checkpoint's hyper-parameters do not "
                        f"hold (values that are not plain data, such as modules, are not stored, nor are ignored "
                        f"ones); pass them as keyword overrides: {cls.__name__}.load_from_checkpoint(path, {example})")
    return kwargs


def load_from_checkpoint(cls: type[_T], checkpoint_path: str | os.PathLike | IO[bytes],
                         map_location: MAP_LOCATION = None,
                         hparams_file: str | os.PathLike | None = None, strict: bool | None = None,
                         weights_only: bool = True, **overrides: object) -> _T:
    """Build a ``cls`` from a checkpoint: ``cls(**{**saved hyper-parameters, **overrides})``, then restore its
    state (a module: ``configure_model()``, ``on_load_checkpoint(checkpoint)``, ``load_state_dict``; a
    datamodule: ``load_state_dict`` of its saved state). The module is left in training mode, as Lightning does.

    :param checkpoint_path: a path or an open binary file.
    :param map_location: as for :func:`torch.load` (a device, a string, a dict or a function); the module ends on
        the device of its loaded weights.
    :param hparams_file: a YAML file whose hyper-parameters replace the checkpoint's.
    :param strict: passed to ``load_state_dict``; ``None`` takes the module's ``strict_loading``, else ``True``.
    :param weights_only: ``torch.load(weights_only=...)``: ``True`` (the default) refuses to unpickle objects.
    :param overrides: ``__init__`` arguments that replace the saved ones, or that were not saved (modules).
        If ``cls.__init__`` takes no ``**kwargs``, saved hyper-parameters it does not accept are not passed.
        A stored class or function reference is resolved from the modules already imported (nothing is imported).
    :raises CheckpointError: an ``__init__`` argument is a stored reference that does not resolve in this process
        (its module is not imported, or holds no such class or function), and no override replaces it.
    :raises accelkit.utilities.bounded.DataBombError: the hyper-parameters (of the checkpoint or of
        ``hparams_file``) stand for more values than :data:`~accelkit.utilities.bounded.MAX_VALUES` once shared
        lists and aliases are expanded, before anything copies them.
    :raises TypeError: a required ``__init__`` argument is neither saved nor given (an override that is no
        ``__init__`` argument is warned about and not passed).
    """
    checkpoint = _read_checkpoint(checkpoint_path, map_location, weights_only)
    key = getattr(cls, "CHECKPOINT_HYPER_PARAMS_KEY", HPARAMS_KEY)
    name_key = getattr(cls, "CHECKPOINT_HYPER_PARAMS_NAME", HPARAMS_NAME_KEY)
    if hparams_file is not None:
        checkpoint[key] = load_hparams_file(hparams_file)
    else:  # shared lists in the pickled data would be copied once per use below
        check_expanded_size(checkpoint.get(key), f"checkpoint {_name(checkpoint_path)} {key}")
    saved = checkpoint.get(key) or {}
    resolved = {name: resolve_references(value, name) for name, value in saved.items()}  # classes, functions
    stored = {name: _attribute_access(value) for name, value in resolved.items()}
    kwargs = _init_kwargs(cls, stored, checkpoint.get(name_key), overrides)
    _refuse_unresolved(kwargs, checkpoint_path)
    checkpoint[key] = {**{name: saved[name] if isinstance(value, Unresolved) else value
                          for name, value in resolved.items()}, **overrides}
    obj = cls(**kwargs)
    if isinstance(obj, torch.nn.Module):
        restore_module_state(obj, checkpoint, strict)
    elif callable(getattr(obj, "load_state_dict", None)):
        restore_datamodule_state(cast(StateLoader, obj), checkpoint)  # (its load_state_dict is callable)
    return obj


def _refuse_unresolved(kwargs: Mapping[str, object], source: object) -> None:
    """Refuse to build the object when an ``__init__`` argument is a stored class or function reference that did
    not resolve in this process (see :mod:`accelkit.module.references`)."""
    from accelkit.checkpoint.files import CheckpointError

    unresolved = first_unresolved(kwargs)
    if unresolved is not None:
        named = os.fspath(source) if isinstance(source, (str, os.PathLike)) else getattr(source, "name", source)
        raise CheckpointError(f"checkpoint {str(named)!r}: {unresolved.message}")


def restore_module_state(module: nn.Module, checkpoint: dict[str, Any], strict: bool | None) -> None:
    """Restore a module built by :func:`~accelkit.module.hparams.load_from_checkpoint`: its ``configure_model``,
    ``on_load_checkpoint``
    and ``load_state_dict``, then a move to the checkpoint's device."""
    # strict_loading set on the instance (in __init__) is a declaration that an explicit strict must match;
    # a class-level value is only the default
    declared = module.__dict__.get("strict_loading", module.__dict__.get("_strict_loading"))
    if declared is not None and strict is not None and strict != declared:
        raise ValueError(f"load_from_checkpoint(..., strict={strict!r}) contradicts "
                         f"{type(module).__name__}.strict_loading={declared!r}; make them agree")
    if strict is None:
        default = getattr(type(module), "strict_loading", True)
        strict = declared if declared is not None else (default if isinstance(default, bool) else True)
    for hook in ("configure_model", "on_load_checkpoint"):
        method = getattr(module, hook, None)
        if callable(method):
            method(checkpoint) if hook == "on_load_checkpoint" else method()
    if "state_dict" not in checkpoint:
        raise KeyError(f"the checkpoint has no 'state_dict' (keys: {sorted(checkpoint)}); it was not written "
                       f"by Trainer.save_checkpoint")
    keys = module.load_state_dict(checkpoint["state_dict"], strict=strict)
    if not strict and (keys.missing_keys or keys.unexpected_keys):
        warnings.warn(f"{type(module).__name__}.load_from_checkpoint(strict=False): missing from the checkpoint "
                      f"{keys.missing_keys}, not in the model {keys.unexpected_keys}", UserWarning, stacklevel=3)
    device = next((t.device for t in checkpoint["state_dict"].values() if isinstance(t, torch.Tensor)), None)
    if device is not None:
        module.to(device)


def restore_datamodule_state(datamodule: StateLoader, checkpoint: Mapping[str, Any]) -> bool:
    """Give ``datamodule.load_state_dict`` the state saved under its class's qualified name, if the checkpoint
    has one (as Lightning does on resume). Returns whether it did."""
    key = type(datamodule).__qualname__
    if key not in checkpoint:
        return False
    datamodule.load_state_dict(checkpoint[key])
    return True
