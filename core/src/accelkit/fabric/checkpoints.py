"""``Fabric.save``/``load``/``load_raw``: a user's state dict (modules, optimizers, anything else by name) through
the Trainer's checkpoint code: atomic files (:func:`accelkit.checkpoint.files.atomic_save`, written by the strategy),
sharded directories where the strategy shards (:mod:`accelkit.checkpoint.sharded`, every entry holding a module's or
an optimizer's state sharded, readable at another world size), weights-only reading by default, the format detected
on load."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import torch
from torch import nn

from accelkit.checkpoint import files as ckpt
from accelkit.checkpoint import sharded
from accelkit.fabric.wrappers import FabricModule, FabricOptimizer, unwrap

if TYPE_CHECKING:
    from accelkit.fabric.fabric import Fabric


class Stateful(Protocol):
    """An entry of a Fabric's state saved and restored through its own state dict (a scheduler, a data loader)."""

    def state_dict(self) -> Mapping[str, object]:
        """The object's state."""

    def load_state_dict(self, state_dict: Mapping[str, object], /) -> object:
        """Restore the state :meth:`state_dict` gave."""


def _kind(value: object) -> str:
    if isinstance(value, (FabricModule, nn.Module)):
        return "module"
    if isinstance(value, (FabricOptimizer, torch.optim.Optimizer)):
        return "optimizer"
    if callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        return "stateful"
    return "plain"


def _forward_module(fabric: Fabric, value: object) -> nn.Module:
    """What the strategy set up for a module entry (the module itself when it was never set up)."""
    if isinstance(value, FabricModule):
        return value.forward_module
    return cast(nn.Module, value)  # an entry _kind() calls a module


def user_optimizer(value: object) -> torch.optim.Optimizer:
    """The user's optimizer of an entry :func:`_kind` calls an optimizer (a :class:`FabricOptimizer` or the optimizer
    itself)."""
    return cast(torch.optim.Optimizer, unwrap(value))  # _kind() said so


def _optimizer_owner(fabric: Fabric, optimizer: object, state: Mapping[str, object]) -> nn.Module:
    """The set-up module whose parameters ``optimizer`` steps: recorded at setup, else found among ``state``'s."""
    owner = fabric.optimizer_module(cast("torch.optim.Optimizer | FabricOptimizer", optimizer))  # _kind() says so
    first = next((p for g in user_optimizer(optimizer).param_groups for p in g["params"]), None)
    for value in state.values() if owner is None else ():
        if isinstance(value, (FabricModule, nn.Module)) and any(p is first for p in value.parameters()):
            owner = _forward_module(fabric, value)
            break
    if owner is None:
        raise ValueError("Fabric.save/load: an optimizer in the state was not set up with Fabric.setup() or "
                         "setup_optimizers() after its module's setup; set it up so its module is known")
    return owner


def shards_checkpoints(fabric: Fabric) -> bool:
    """Whether ``fabric``'s strategy writes sharded checkpoint directories (its ``save_distributed_checkpoint``)."""
    return bool(getattr(fabric.strategy, "save_distributed_checkpoint", False))


def converted(fabric: Fabric, state: Mapping[str, object], filter: Mapping[str, Callable[[str, Any], bool]] | None,
              ) -> tuple[dict[str, Any], list[str]]:  # noqa: A002 - Lightning's argument name
    """``state`` as a checkpoint: modules and optimizers as their (possibly sharded) state dicts, stateful objects
    as theirs, the rest as is; ``filter[key](name, value)`` keeps the items of entry ``key`` it accepts. Returns
    the checkpoint and the entries holding module or optimizer states."""
    if not isinstance(state, dict):
        raise TypeError(f"Fabric.save(path, state): state must be a dict of names to objects, got "
                        f"{type(state).__name__}")
    filter = filter or {}
    unknown = sorted(set(filter) - set(state))
    if unknown or not all(callable(f) for f in filter.values()):
        raise ValueError(f"Fabric.save(filter=...): give a callable(name, value) -> bool for keys of the state; "
                         f"{unknown or [k for k, f in filter.items() if not callable(f)]} are not")
    strategy, checkpoint, sharded_keys = fabric.strategy, {}, []
    for key, value in state.items():
        kind = _kind(value)
        entry: object
        if kind == "module":
            entry = strategy.module_state_dict(_forward_module(fabric, value))
            sharded_keys.append(key)
        elif kind == "optimizer":
            entry = strategy.optimizer_state_dict(_optimizer_owner(fabric, value, state), user_optimizer(value))
            sharded_keys.append(key)
        elif kind == "stateful":
            entry = cast(Stateful, value).state_dict()
        else:
            entry = value
        if key in filter:  # a filtered entry is a state dict (a module's, an optimizer's or a plain dict)
            entry = {k: v for k, v in cast(Mapping[str, object], entry).items() if filter[key](k, v)}
        checkpoint[key] = entry
    return checkpoint, sharded_keys


def save(fabric: Fabric, path: str | os.PathLike, state: Mapping[str, object],
         filter: Mapping[str, Callable[[str, Any], bool]] | None) -> None:  # noqa: A002 - Lightning's argument name
    """Write ``state`` at ``path``: a sharded directory where the strategy shards, else one file written atomically
    by global rank 0 (every process waits for it)."""
    fabric.setup_environment()
    checkpoint, sharded_keys = converted(fabric, state, filter)
    strategy = fabric.strategy
    if shards_checkpoints(fabric):
        sharded.save(checkpoint, path, barrier=strategy.barrier, broadcast=strategy.broadcast,
                     is_global_zero=strategy.is_global_zero, sharded_keys=sharded_keys)
        return
    for key in sharded_keys:  # optimizer states in optimizer.state_dict()'s own form
        if _kind(state[key]) == "optimizer":
            checkpoint[key] = sharded.optimizer_state_by_index(checkpoint[key])
    if strategy.is_global_zero:
        ckpt.atomic_save(ckpt.to_cpu(checkpoint), path)
    strategy.barrier("Fabric.save")


def _read(fabric: Fabric, path: str | os.PathLike, state: Mapping[str, object] | None,
          weights_only: bool) -> dict[str, Any]:
    """The checkpoint at ``path``: a file read whole; a sharded directory read into this run's shards of
    ``state``'s modules and optimizers when the strategy shards, else whole."""
    if not sharded.is_sharded_checkpoint(path):
        if Path(path).is_dir():
            raise IsADirectoryError(f"Fabric.load({os.fspath(path)!r}): a directory but not a sharded checkpoint "
                                    f"(no {sharded.METADATA_FILE} and .metadata in it)")
        return ckpt.load(path, weights_only=weights_only)
    if state is None or not shards_checkpoints(fabric):
        return sharded.load_full(path, weights_only=weights_only)
    checkpoint = sharded.load_metadata(path, weights_only=weights_only)
    named = checkpoint.pop(sharded.SHARDED_KEYS_KEY, [])
    template, strategy = {}, fabric.strategy
    for key in named:
        value = state.get(key)
        if _kind(value) == "module":
            template[key] = strategy.module_state_dict(_forward_module(fabric, value))
        elif _kind(value) == "optimizer":
            template[key] = strategy.optimizer_state_dict(_optimizer_owner(fabric, value, state), user_optimizer(value))
    checkpoint.update(sharded.load_into(path, template, weights_only) if template else {})
    return checkpoint


def load(fabric: Fabric, path: str | os.PathLike, state: dict[str, Any] | None, strict: bool,
         weights_only: bool | None) -> dict[str, Any]:
    """Restore ``state`` from ``path`` (see :meth:`accelkit.Fabric.load`); returns the entries not restored."""
    fabric.setup_environment()
    checkpoint = _read(fabric, path, state, True if weights_only is None else weights_only)
    if state is None:
        return checkpoint
    missing = [key for key in state if key not in checkpoint]
    if missing and strict:
        raise KeyError(f"Fabric.load({os.fspath(path)!r}): the checkpoint has no {missing} (it holds "
                       f"{sorted(checkpoint)}); pass strict=False to restore only what it has")
    strategy = fabric.strategy
    for key, value in state.items():
        if key not in checkpoint:
            continue
        entry = checkpoint.pop(key)
        kind = _kind(value)
        if kind == "module":
            strategy.load_module_state_dict(_forward_module(fabric, value), entry, strict=strict)
        elif kind == "optimizer":
            strategy.load_optimizer_state_dict(_optimizer_owner(fabric, value, state), user_optimizer(value), entry)
        elif kind == "stateful":
            value.load_state_dict(entry)
        else:
            state[key] = entry
    return checkpoint


def load_raw(fabric: Fabric, path: str | os.PathLike, obj: nn.Module | torch.optim.Optimizer | FabricOptimizer,
             strict: bool, weights_only: bool | None) -> None:
    """Load a plain ``state_dict`` file into a module or optimizer (see :meth:`accelkit.Fabric.load_raw`)."""
    fabric.setup_environment()
    safe = True if weights_only is None else weights_only
    if sharded.is_sharded_checkpoint(path):
        raise ValueError(f"Fabric.load_raw({os.fspath(path)!r}): a sharded checkpoint; load it with Fabric.load")
    ckpt.check_file(path)
    try:
        state_dict = torch.load(path, map_location="cpu", weights_only=safe)
    except Exception as exc:  # noqa: BLE001 - the one refusal of unsafe content, as every checkpoint read
        import pickle

        if safe and isinstance(exc, pickle.UnpicklingError):
            raise ckpt.unsafe_checkpoint_error(repr(os.fspath(path)), exc) from exc
        raise
    kind = _kind(obj)
    if kind == "module":
        fabric.strategy.load_module_state_dict(_forward_module(fabric, obj), state_dict, strict=strict)
    elif kind == "optimizer":
        fabric.strategy.load_optimizer_state_dict(_optimizer_owner(fabric, obj, {}), user_optimizer(obj), state_dict)
    else:
        raise TypeError(f"Fabric.load_raw(path, obj): obj must be a module or an optimizer, got {type(obj).__name__}")
