"""Counting the reads of a logged value to the host (on a GPU each is a synchronization), the same way on
accelkit's Trainer and on Lightning's (``tests/test_logging_api.py``)."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs

#: what reads a tensor's value to the host
READS = (torch.Tensor.__float__, torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy)


class HostReads(torch.Tensor):
    """A tensor that counts the reads of its value to the host (:data:`READS`) while ``counting`` is set."""

    reads = 0
    counting = False

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if HostReads.counting and func in READS:
            HostReads.reads += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def host_reads_during_steps(framework: str, root: Any, logger: bool = False) -> tuple[int, dict[str, Any]]:
    """Fit 5 batches (``framework``: ``"accelkit"`` or ``"lightning"``) of a module that logs a :class:`HostReads`
    every step, with ``log_every_n_steps=1`` and no logger (a CSV logger with ``logger=True``, accelkit only).
    Returns the reads of the logged value to the host from the first batch's start to the last batch's start (the
    logging of batches 0-3 included), and ``trainer.logged_metrics`` after the fit."""
    chosen = pick(framework)

    class Watched(linear_module(chosen.Module, lr=0.01)):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = F.mse_loss(self.layer(batch[0]), batch[1])
            self.log("watched", loss.detach().as_subclass(HostReads))
            return loss

    class Window(chosen.Callback):  # type: ignore[misc, name-defined]
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            HostReads.counting = batch_idx < 4

    log = chosen.loggers.CSVLogger(root) if logger else False
    generator = torch.Generator().manual_seed(0)
    data = random_pairs(20, generator)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=1, log_every_n_steps=1, logger=log,
                             callbacks=[Window()], enable_model_summary=False, num_sanity_val_steps=0,
                             enable_progress_bar=False, enable_checkpointing=False, default_root_dir=root)
    HostReads.reads, HostReads.counting = 0, False
    try:
        trainer.fit(Watched(), DataLoader(data, batch_size=4))
    finally:
        HostReads.counting = False
    return HostReads.reads, dict(trainer.logged_metrics)
