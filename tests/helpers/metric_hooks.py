"""A name logged from two hooks: what ``trainer.callback_metrics``, ``logged_metrics``, ``progress_bar_metrics`` and
a CSV logger hold, recorded the same way on accelkit's Trainer and on Lightning's (``tests/test_logging_api.py``
compares them).

A scenario is a pair of hooks, the first of which logs first in each batch or epoch. In one fit, the two hooks log
one name for each combination of their options: ``prog_bar`` (each hook's, 4 pairs) x ``logger`` (4 pairs) x
``on_step``/``on_epoch`` (each hook's: the default, ``on_step`` only, ``on_epoch`` only, both; an epoch-end hook
takes the default and ``on_epoch`` only, which are all Lightning allows there), each hook a value of its own that
changes with the batch (so that the epoch aggregates of the two hooks differ). A callback reads the three dicts
from the training and validation hooks (:data:`helpers.metric_reads.HOOKS`); then the fit's end, the CSV logger's
rows and a ``trainer.validate`` after it.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs, reading_callback
from helpers.metric_reads import HOOKS, logger_rows, reading, snapshot

#: the scenarios the tests compare, by name: the two hooks logging each name (``callback.``: a Callback's hook,
#: which logs through ``pl_module.log``)
SCENARIOS: dict[str, tuple[str, str]] = {
    "step_then_batch_end": ("training_step", "on_train_batch_end"),
    "batch_start_then_step": ("on_train_batch_start", "training_step"),
    "step_then_callback_batch_end": ("training_step", "callback.on_train_batch_end"),
    "step_then_epoch_end": ("training_step", "on_train_epoch_end"),
    "val_step_then_val_batch_end": ("validation_step", "on_validation_batch_end"),
    "val_step_then_val_epoch_end": ("validation_step", "on_validation_epoch_end"),
}

#: ``(on_step, on_epoch)`` choices of a hook that runs per batch, and of an epoch-end hook
PER_BATCH = ((None, None), (True, False), (False, True), (True, True))
AT_EPOCH_END = ((None, None), (False, True))


def names(first: str, second: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """``{name: (first hook's options, second hook's options)}``: every combination, named by its option indices."""
    def levels(hook: str) -> tuple[tuple[bool | None, bool | None], ...]:
        return AT_EPOCH_END if hook.endswith("epoch_end") else PER_BATCH

    found = {}
    for prog_bar, logger, (a, b) in itertools.product(itertools.product((False, True), repeat=2),
                                                      itertools.product((False, True), repeat=2),
                                                      itertools.product(levels(first), levels(second))):
        options = []
        for i, (on_step, on_epoch) in enumerate((a, b)):
            chosen: dict[str, Any] = {"prog_bar": prog_bar[i], "logger": logger[i]}
            if on_step is not None:
                chosen.update(on_step=on_step, on_epoch=on_epoch)
            options.append(chosen)
        code = "".join(str(int(x)) for x in (*prog_bar, *logger))
        found[f"m{code}_{levels(first).index(a)}{levels(second).index(b)}"] = (options[0], options[1])
    return found


def record(framework: str, root: str, scenario: str) -> list[Any]:
    """Fit 2 epochs of 3 training and 2 validation batches with ``framework`` (``"accelkit"`` or ``"lightning"``),
    the two hooks of ``scenario`` logging every name of :func:`names`; returns ``[hook, epoch, batch_idx,
    snapshot]`` for every read (see the module's docstring)."""
    first, second = SCENARIOS[scenario]
    logged = names(first, second)
    os.makedirs(root, exist_ok=True)
    chosen = pick(framework)
    seen: list[Any] = []
    counts = {first: 0, second: 0}

    def log_all(module: Any, hook: str) -> None:
        counts[hook] += 1
        which = 0 if hook == first else 1
        for i, (name, options) in enumerate(logged.items()):
            module.log(name, float(100 * which + counts[hook] + 0.01 * i), **options[which])

    def hook_logging(hook: str) -> Any:
        def run(self: Any, *args: Any) -> Any:
            log_all(self if isinstance(self, chosen.Module) else args[1], hook)
            if hook in ("training_step", "validation_step"):
                loss = F.mse_loss(self.layer(args[0][0]), args[0][1])
                return loss if hook == "training_step" else None
            return None
        # a function of its own, named for its hook, as a Module's or Callback's hook is
        run.__code__ = run.__code__.replace(co_name=hook.split(".")[-1])
        return run

    class Logs(linear_module(chosen.Module, lr=0.05)):  # type: ignore[misc]
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            pass

    callbacks = [reading_callback(chosen.Callback, HOOKS, reading(seen))()]
    for hook in (first, second):
        if hook.startswith("callback."):
            logging_callback = type("LogsToo", (chosen.Callback,), {hook[len("callback."):]: hook_logging(hook)})
            callbacks.insert(0, logging_callback())
        else:
            setattr(Logs, hook, hook_logging(hook))
    generator = torch.Generator().manual_seed(0)
    train, val = random_pairs(12, generator), random_pairs(8, generator)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=2, log_every_n_steps=1,
                             logger=chosen.loggers.CSVLogger(root), callbacks=callbacks, num_sanity_val_steps=0,
                             enable_model_summary=False, enable_progress_bar=False, enable_checkpointing=False,
                             default_root_dir=root)
    module = Logs()
    trainer.fit(module, DataLoader(train, batch_size=4), DataLoader(val, batch_size=4))
    seen.append(["after_fit", trainer.current_epoch, None, snapshot(trainer)])
    seen.append(["logger_rows", None, None, logger_rows(trainer.logger.log_dir)])
    trainer.validate(module, DataLoader(val, batch_size=4), verbose=False)
    seen.append(["after_validate", trainer.current_epoch, None, snapshot(trainer)])
    return seen
