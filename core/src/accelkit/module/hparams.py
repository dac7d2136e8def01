"""Hyper-parameters: ``save_hyperparameters()``, ``self.hparams`` and ``load_from_checkpoint``.

:class:`HyperparametersMixin` gives :class:`~accelkit.Module` and :class:`~accelkit.DataModule` the
LightningModule API for hyper-parameters. Checkpoints keep them as plain data only (see :func:`plain_hparams`;
classes and functions by reference, :mod:`accelkit.module.references`), so
:func:`load_from_checkpoint` reads checkpoints with ``torch.load(weights_only=True)``: loading a checkpoint never
runs code from the file. Those storage functions live in :mod:`accelkit.module.saving` and are public here.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import sys
import types
import warnings
from argparse import Namespace
from collections.abc import Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from torch import nn

if TYPE_CHECKING:
    from torch.serialization import MAP_LOCATION

from accelkit.module.saving import (
    HPARAMS_KEY,
    HPARAMS_NAME_KEY,
    checkpoint_entries,
    hparams_to_log,
    load_from_checkpoint,
    load_hparams_file,
    plain_hparams,
)

# The storage side (plain data, checkpoint entries, loading) lives in hparams_io; its names are public here too.
from accelkit.utilities.parsing import AttributeDict

__all__ = [
    "AttributeDict",
    "HyperparametersMixin",
    "checkpoint_entries",
    "hparams_to_log",
    "load_from_checkpoint",
    "load_hparams_file",
    "plain_hparams",
]


#: the class of the object :meth:`HyperparametersMixin.load_from_checkpoint` builds
_H = TypeVar("_H", bound="HyperparametersMixin")

# ------------------------------------------------------------------------------------------------ capture
def _init_frames(obj: object, start: types.FrameType) -> list[types.FrameType]:
    """The ``__init__`` frames of ``obj`` on the stack, innermost (base class) first.

    Frames before the first ``__init__`` of ``obj`` are skipped (``save_hyperparameters`` may be called from a
    helper); the walk stops at the first frame after them that is not an ``__init__`` of ``obj``.
    """
    found: list[types.FrameType] = []
    frame: types.FrameType | None = start
    while frame is not None:
        code = frame.f_code
        mine = (code.co_name in ("__init__", "__post_init__") and code.co_argcount > 0
                and frame.f_locals.get(code.co_varnames[0]) is obj)
        if mine:
            found.append(frame)
        elif found:
            break
        frame = frame.f_back
    return found


def _frame_arguments(frame: types.FrameType) -> dict[str, object]:
    """The arguments of the function running in ``frame`` (their current values), ``**kwargs`` spread out,
    without ``self``, ``*args`` and ``__class__``."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[1:count])  # the first is self
    var_keyword = None
    if code.co_flags & inspect.CO_VARARGS:
        count += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        var_keyword = code.co_varnames[count]
    local = frame.f_locals
    args = {name: local[name] for name in names if name in local and name != "__class__"}
    if var_keyword and isinstance(local.get(var_keyword), Mapping):
        args.update(local[var_keyword])
    return args


def _captured_init_arguments(obj: object, frame: types.FrameType) -> dict[str, object] | None:
    """Every ``__init__`` argument of ``obj``'s class hierarchy found from ``frame`` (``None`` if no ``__init__``
    of ``obj`` is on the stack). A subclass's value wins over its base's for the same name."""
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init and hasattr(obj, f.name)}
    frames = _init_frames(obj, frame)
    if not frames:
        return None
    captured: dict[str, object] = {}
    for init_frame in frames:  # base first, so the subclass overrides
        captured.update(_frame_arguments(init_frame))
    return captured


def _as_hparams(value: object) -> AttributeDict:
    if isinstance(value, (Namespace, types.SimpleNamespace)):
        return AttributeDict(vars(value))
    if isinstance(value, Mapping):
        return AttributeDict(value)
    if isinstance(value, (bool, int, float, str)):
        raise ValueError(f"save_hyperparameters({value!r}): a single value is not a set of hyper-parameters; "
                         f"pass names of __init__ arguments as strings, a dict, or keywords (lr={value!r})")
    raise ValueError(f"save_hyperparameters() takes a dict (or any mapping, such as an OmegaConf DictConfig), an "
                     f"argparse.Namespace, a types.SimpleNamespace or an AttributeDict, not {type(value).__name__}; "
                     f"pass vars(obj) or the names of __init__ arguments as strings")


def _names(ignore: str | Iterable[str] | None) -> list[str]:
    if ignore is None:
        return []
    if isinstance(ignore, str):
        return [ignore]
    names = list(ignore)
    wrong = [name for name in names if not isinstance(name, str)]
    if wrong:
        raise TypeError(f"save_hyperparameters(ignore=...) takes names as strings, got {wrong!r}")
    return names


class _class_only_method(classmethod):
    """A classmethod that refuses to be called on an instance (``model.load_from_checkpoint(path)`` would
    build a new object and leave ``model`` untouched, which is never what the caller meant)."""

    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return super().__get__(instance, owner)
        name = self.__func__.__name__
        cls_name = type(instance).__name__

        def refuse(*args: object, **kwargs: object) -> NoReturn:
            raise TypeError(f"{cls_name}.{name} builds a new object; call it on the class and use the result: "
                            f"model = {cls_name}.{name}(path)")

        return refuse


class HyperparametersMixin:
    """``save_hyperparameters()``, ``hparams``, ``hparams_initial`` and ``load_from_checkpoint``.

    Inherited by :class:`~accelkit.Module` and :class:`~accelkit.DataModule`; it needs no ``__init__`` call.
    """

    #: Properties TorchScript must not compile (``torch.jit.script`` of a module with hyper-parameters).
    __jit_unused_properties__: list[str] = ["hparams", "hparams_initial", "_log_hyperparams"]
    #: Checkpoint key of the hyper-parameters of this kind of object.
    CHECKPOINT_HYPER_PARAMS_KEY = HPARAMS_KEY
    #: Checkpoint key of the ``__init__`` argument the hyper-parameters were passed as (if one).
    CHECKPOINT_HYPER_PARAMS_NAME = HPARAMS_NAME_KEY

    def save_hyperparameters(self, *args: object, ignore: str | Iterable[str] | None = None,
                             frame: types.FrameType | None = None, logger: bool = True, **values: object) -> None:
        """Record hyper-parameters in :attr:`hparams`: they go into checkpoints and to the loggers.

        * no argument: every argument of the calling ``__init__`` (of each class of the hierarchy whose
          ``__init__`` is on the call stack), ``**kwargs`` spread out, ``self`` and ``*args`` left out;
        * names as strings: only those ``__init__`` arguments;
        * one ``dict`` (or other mapping), ``argparse.Namespace``, ``types.SimpleNamespace`` or
          :class:`AttributeDict`: those values;
        * keywords (an accelkit extension, ``save_hyperparameters(lr=0.1)``): those values, added to the ones
          already saved. The names ``ignore``, ``frame`` and ``logger`` cannot be saved this way.

        :param ignore: a name or names to leave out (for example modules passed to ``__init__``).
        :param frame: the frame to read ``__init__`` arguments from (default: the caller's).
        :param logger: send these hyper-parameters to the loggers.
        """
        self.__dict__["_log_hyperparams"] = logger
        ignored = _names(ignore)
        if not args and values:
            hparams = AttributeDict(self.hparams)
            hparams.update(values)
            self.__dict__.setdefault("_hparams_name", "kwargs")
        else:
            collected = self._collect_hparams(args, frame or sys._getframe(1))
            if collected is None:
                return
            hparams = collected
            hparams.update(values)
        missing = [name for name in ignored if name not in hparams]
        if missing:
            warnings.warn(f"{type(self).__name__}.save_hyperparameters(ignore={ignored!r}): {missing!r} "
                          f"matched no hyper-parameter (saved: {sorted(hparams)})", UserWarning, stacklevel=2)
        for name in ignored:
            hparams.pop(name, None)
        self._set_hparams(hparams)
        for name, value in self.hparams.items():
            if isinstance(value, nn.Module):
                # Lightning's warning and advice, once (checkpoints leave the module out without warning again),
                # with what accelkit does differently: the module is not stored with the hyper-parameters
                warnings.warn(f"Attribute {name!r} is an instance of `nn.Module` and is already saved during "
                              f"checkpointing. It is recommended to ignore them using "
                              f"`self.save_hyperparameters(ignore=[{name!r}])`. (accelkit leaves it out of the "
                              f"checkpoint's hyper-parameters: pass it to load_from_checkpoint(..., {name}=...).)",
                              UserWarning, stacklevel=2)
        try:
            initial = copy.deepcopy(self.hparams)
        except Exception:  # a value that cannot be deep-copied is shared rather than failing the constructor
            initial = AttributeDict(self.hparams)
        self.__dict__["_hparams_initial"] = initial

    def _collect_hparams(self, args: tuple[object, ...], frame: types.FrameType) -> AttributeDict | None:
        if len(args) == 1 and not isinstance(args[0], str) and not args[0]:
            return None  # save_hyperparameters(None) / an empty dict: nothing to save (as Lightning)
        objects = [arg for arg in args if not isinstance(arg, str)]
        if objects:
            if len(args) > 1:
                raise TypeError(f"{type(self).__name__}.save_hyperparameters() takes either names of __init__ "
                                f"arguments or one dict/Namespace, not {len(args)} mixed arguments")
            given = _captured_init_arguments(self, frame) or {}
            names = [name for name, value in given.items() if value is args[0]]
            self.__dict__["_hparams_name"] = names[0] if names else None
            return _as_hparams(args[0])
        captured = _captured_init_arguments(self, frame)
        if captured is None:
            warnings.warn(f"{type(self).__name__}.save_hyperparameters() was called outside its __init__, so "
                          f"there are no __init__ arguments to capture; pass values as keywords or a dict",
                          UserWarning, stacklevel=3)
            captured = {}
        if args:
            unknown = [name for name in args if name not in captured]
            if unknown:
                raise ValueError(f"{type(self).__name__}.save_hyperparameters({', '.join(map(repr, args))}): "
                                 f"{unknown!r} not among the __init__ arguments {sorted(captured)}")
            # (every argument is a name here: one that is not returned above)
            captured = {name: captured[name] for name in cast("tuple[str, ...]", args)}
        self.__dict__["_hparams_name"] = "kwargs" if captured else None
        return AttributeDict(captured)

    def _set_hparams(self, hparams: Mapping[str, object] | Namespace) -> None:
        """Replace :attr:`hparams` with ``hparams`` (a mapping or an ``argparse.Namespace``)."""
        self.__dict__["_hparams"] = _as_hparams(hparams)

    @property
    def hparams(self) -> AttributeDict:
        """The saved hyper-parameters, by key or attribute (``self.hparams.lr``); changes are kept."""
        hparams = self.__dict__.get("_hparams")
        if hparams is None:
            hparams = self.__dict__["_hparams"] = AttributeDict()
        return hparams

    @hparams.setter
    def hparams(self, value: object) -> None:
        raise AttributeError(f"{type(self).__name__}.hparams cannot be assigned; "
                             f"call self.save_hyperparameters(...) instead")

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyper-parameters as saved, unaffected by later changes to :attr:`hparams`."""
        initial = self.__dict__.get("_hparams_initial")
        return AttributeDict(initial) if initial is not None else AttributeDict()

    @property
    def _log_hyperparams(self) -> bool:
        return bool(self.__dict__.get("_log_hyperparams", False))

    @_log_hyperparams.setter
    def _log_hyperparams(self, value: bool) -> None:
        self.__dict__["_log_hyperparams"] = value

    @_class_only_method
    def load_from_checkpoint(cls: type[_H], checkpoint_path: str | os.PathLike | IO[bytes],
                             map_location: MAP_LOCATION = None,
                             hparams_file: str | os.PathLike | None = None, strict: bool | None = None,
                             weights_only: bool = True, **overrides: object) -> _H:
        """Build an object of this class from a checkpoint: see :func:`accelkit.module.hparams.load_from_checkpoint`.

        Call it on the class (``model = Model.load_from_checkpoint(path)``); it returns a new object.
        """
        return load_from_checkpoint(cls, checkpoint_path, map_location=map_location, hparams_file=hparams_file,
                                    strict=strict, weights_only=weights_only, **overrides)

