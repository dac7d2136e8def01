"""What a callback sees of ``trainer.callback_metrics``, ``logged_metrics`` and ``progress_bar_metrics`` from each
hook, recorded the same way on accelkit's Trainer and on Lightning's (``tests/test_logging_api.py`` compares them).

A scenario is a dict of options: ``logger`` (a CSV logger), ``log_every_n_steps``, ``sanity`` (sanity-check
batches), ``epoch_end_log`` (the Module logs in ``on_train_epoch_end``), ``validate`` (``trainer.validate`` after
the fit, read the same way), ``devices`` (2: ``ddp_fork``, each rank's reads), ``val_loaders`` (2: two validation
loaders, with values logged per step and per epoch, with and without ``add_dataloader_idx``), ``rows`` (the CSV
logger's values, :func:`logger_rows`), ``in_place`` (tensors changed in place after they are logged). The Module
logs, in ``training_step``, values of every ``on_step``/``on_epoch`` combination, a Python number,
``prog_bar=True``, ``sync_dist=True`` (and the same value without it, and one whose ``batch_size`` differs by rank),
``logger=False``, ``reduce_fx="max"``, integer and double tensors; in ``validation_step``, a default (epoch) value,
a per-step one on the progress bar and a ``sync_dist`` one.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import linear_module, pick, random_pairs, reading_callback

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "no_logger": {"logger": False, "log_every_n_steps": 1, "validate": True},
    "logger_every_2": {"logger": True, "log_every_n_steps": 2},
    "no_logger_every_5_sanity": {"logger": False, "log_every_n_steps": 5, "sanity": 1},
    "epoch_end_log": {"logger": True, "log_every_n_steps": 1, "epoch_end_log": True},
    "ddp_fork": {"logger": False, "log_every_n_steps": 1, "devices": 2},
    "two_val_loaders": {"logger": True, "log_every_n_steps": 1, "val_loaders": 2, "rows": True},
    "in_place_after_log": {"logger": True, "log_every_n_steps": 1, "in_place": True, "rows": True},
}

#: the hooks the recording callback reads the three dicts from
HOOKS = ("on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end",
         "on_validation_start", "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end",
         "on_train_epoch_end", "on_train_end", "on_fit_end")

KINDS = ("callback_metrics", "logged_metrics", "progress_bar_metrics")


def describe(value: Any) -> Any:
    """A read value as JSON: a tensor as ``[value, dtype, device type, ndim]``, a number as ``[value, type]``."""
    if isinstance(value, torch.Tensor):
        return [float(value), str(value.dtype), value.device.type, value.ndim]
    return [float(value), type(value).__name__]


def snapshot(trainer: Any) -> dict[str, dict[str, Any]]:
    """The three dicts as :func:`describe` writes their values."""
    return {kind: {name: describe(value) for name, value in getattr(trainer, kind).items()} for kind in KINDS}


def record(framework: str, root: str, scenario: str) -> list[Any]:
    """Fit 2 epochs of 3 training and 2 validation batches with ``framework`` (``"accelkit"`` or ``"lightning"``)
    in scenario ``scenario`` (:data:`SCENARIOS`); returns ``[hook, epoch, batch_idx, snapshot]`` for every
    :data:`HOOKS` call, ``["after_fit", ...]`` and ``["after_validate", ...]``."""
    options = SCENARIOS[scenario]
    os.makedirs(root, exist_ok=True)
    chosen = pick(framework)
    seen: list[Any] = []

    class Logs(linear_module(chosen.Module, lr=0.05)):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("default", loss)
            self.log("both", loss * 2, on_step=True, on_epoch=True, prog_bar=True)
            self.log("epoch_only", loss * 3, on_step=False, on_epoch=True, prog_bar=True)
            self.log("number", float(batch_idx) + 0.5, on_step=True, on_epoch=True)
            self.log("synced", loss * 4, on_epoch=True, sync_dist=True)
            self.log("hidden", loss * 5, logger=False, on_epoch=True)
            self.log("peak", loss * 6, on_step=False, on_epoch=True, reduce_fx="max")
            self.log("count", torch.tensor(batch_idx), on_epoch=True)  # an integer tensor
            self.log("double", loss.double(), on_step=True, on_epoch=True)
            self.log("rank_synced", float(self.global_rank) + loss, on_epoch=True, sync_dist=True)
            self.log("rank_own", float(self.global_rank) + loss, on_epoch=True)
            # ranks weigh their values differently: the synced epoch mean weighs each rank by its batch sizes
            self.log("rank_weighted", float(self.global_rank) + loss, on_epoch=True, sync_dist=True,
                     batch_size=1 + 3 * self.global_rank)
            if options.get("in_place"):  # a tensor changed in place after it is logged: the logged value is kept
                kept = loss.detach() * 7
                self.log("changed", kept, on_step=True, on_epoch=True, prog_bar=True)
                self.log("changed_sum", kept, on_step=False, on_epoch=True, reduce_fx="sum")
                self.log("changed_max", kept, on_step=False, on_epoch=True, reduce_fx="max")
                kept.add_(100.0)
            return loss

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("val_loss", loss)
            self.log("val_step", loss * 2, on_step=True, on_epoch=False, prog_bar=True)
            self.log("val_synced", loss * 3, sync_dist=True, prog_bar=True)
            if options.get("val_loaders"):  # names a monitor may name: suffixes in Lightning's order
                self.log("val_both", loss * 4, on_step=True, on_epoch=True, prog_bar=True)
                self.log(f"own_{dataloader_idx}", loss * 5, on_step=True, on_epoch=True, prog_bar=True,
                         add_dataloader_idx=False)

        def on_train_epoch_end(self) -> None:
            if options.get("epoch_end_log"):
                self.log("at_epoch_end", float(self.current_epoch) + 0.25)

    class Reader(reading_callback(chosen.Callback, HOOKS, reading(seen))):  # type: ignore[misc]
        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if devices > 1:  # a worker's reads, for the caller
                with open(os.path.join(root, f"reads{trainer.global_rank}.json"), "w") as handle:
                    json.dump(seen, handle)

    for cls in (Logs, Reader):  # by name, for the workers of ddp_fork (forked from here, so they have them)
        _name(cls, f"{cls.__name__}_{framework}")
    devices = options.get("devices", 1)
    generator = torch.Generator().manual_seed(0)
    train = random_pairs(12, generator)
    if devices > 1:  # each rank's samples: the first rank's loss may not depend on how the data is sharded
        train = TensorDataset(train.tensors[0][:1].repeat(16, 1), train.tensors[1][:1].repeat(16, 1))
    val = random_pairs(8, generator)
    spread = {"strategy": "ddp_fork"} if devices > 1 else {}
    trainer = chosen.Trainer(accelerator="cpu", devices=devices, **spread, max_epochs=2,
                             log_every_n_steps=options["log_every_n_steps"],
                             logger=chosen.loggers.CSVLogger(root) if options["logger"] else False,
                             callbacks=[Reader()], num_sanity_val_steps=options.get("sanity", 0),
                             enable_model_summary=False, enable_progress_bar=False, enable_checkpointing=False,
                             default_root_dir=root)
    module = Logs()
    val_loaders = [DataLoader(val, batch_size=4) for _ in range(options.get("val_loaders", 1))]
    trainer.fit(module, DataLoader(train, batch_size=4), val_loaders if len(val_loaders) > 1 else val_loaders[0])
    if devices > 1:  # each rank's reads (the caller's Trainer after a spawned fit: see the migration rows)
        for rank in range(devices):
            with open(os.path.join(root, f"reads{rank}.json")) as handle:
                seen += [[f"{hook} on rank {rank}", *rest] for hook, *rest in json.load(handle)]
        return seen
    seen.append(["after_fit", trainer.current_epoch, None, snapshot(trainer)])
    if options.get("rows"):
        seen.append(["logger_rows", None, None, logger_rows(trainer.logger.log_dir)])
    if options.get("validate"):
        trainer.validate(module, DataLoader(val, batch_size=4), verbose=False)
        seen.append(["after_validate", trainer.current_epoch, None, snapshot(trainer)])
    return seen


def reading(seen: list[Any]) -> Callable[..., None]:
    """What a reading callback (:func:`helpers.frameworks.reading_callback`) does in each hook: append ``[hook,
    epoch, batch_idx or None, snapshot]`` to ``seen``."""
    def read(hook: str, trainer: Any, *args: Any) -> None:
        batch_idx = args[3] if hook.endswith("batch_end") else args[2] if hook.endswith("batch_start") else None
        seen.append([hook, trainer.current_epoch, batch_idx, snapshot(trainer)])
    return read


def logger_rows(log_dir: str) -> dict[str, dict[str, Any]]:
    """What a CSV logger wrote to ``metrics.csv`` in ``log_dir``, as a :func:`snapshot` whose ``logged_metrics`` has
    ``"name #i"``: the ``i``-th value written under ``name``, evaluation steps' values (rows without an ``epoch``)
    included (the rows' step numbers are left out: ``helpers.logger_steps`` compares those)."""
    with open(os.path.join(log_dir, "metrics.csv")) as handle:
        rows = list(csv.DictReader(handle))
    written: dict[str, Any] = {}
    for row in rows:
        for name, value in row.items():
            if name != "step" and value != "":
                count = sum(key.startswith(f"{name} #") for key in written)
                written[f"{name} #{count}"] = [float(value), "float"]
    return {"callback_metrics": {}, "logged_metrics": written, "progress_bar_metrics": {}}


def _name(cls: type, name: str) -> None:
    """Make ``cls`` importable from this module as ``name``, so that pickle can name it."""
    cls.__qualname__ = cls.__name__ = name
    globals()[name] = cls


def differences(ours: list[Any], theirs: list[Any], rel: float = 1e-5) -> list[str]:
    """Where two :func:`record` results differ: a hook read in one and not the other, a name in one dict and not
    the other's, another type, dtype, device or ndim, or a value further than ``rel`` apart. One line each."""
    found = []
    if [row[:3] for row in ours] != [row[:3] for row in theirs]:
        return [f"hooks differ: {[row[:3] for row in ours]} != {[row[:3] for row in theirs]}"]
    for (hook, epoch, batch_idx, seen), (*_, expected) in zip(ours, theirs, strict=True):
        for kind in KINDS:
            for name in sorted(seen[kind].keys() | expected[kind].keys()):
                a, b = seen[kind].get(name), expected[kind].get(name)
                if a is None or b is None or a[1:] != b[1:] or abs(a[0] - b[0]) > rel * max(abs(b[0]), 1e-6):
                    found.append(f"{hook} (epoch {epoch}, batch {batch_idx}) {kind}[{name!r}]: {a} != {b}")
    return found
