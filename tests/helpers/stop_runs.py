"""The training and validation batches a fit runs when a stop is requested in the middle of an epoch, recorded
the same way on accelkit's Trainer and on Lightning's (``tests/test_trainer_arguments.py`` compares them).

A scenario is a dict of Trainer options plus ``stop_after`` (the training batch of epoch 0 after which a callback
sets ``trainer.should_stop``) and ``where`` (``"callback"``: in ``on_train_batch_end``; ``"step"``: the Module sets
it in ``training_step``). Each fit: up to 3 epochs of 6 training batches and 2 validation batches, no sanity check.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import pick

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "callback_mid_epoch": {"stop_after": 2, "where": "callback"},
    "step_mid_epoch": {"stop_after": 2, "where": "step"},
    "last_batch": {"stop_after": 5, "where": "callback"},
    "min_steps_defers": {"stop_after": 1, "where": "callback", "min_steps": 4},
    "min_epochs_defers": {"stop_after": 1, "where": "callback", "min_epochs": 2},
    "val_every_2_epochs": {"stop_after": 2, "where": "callback", "check_val_every_n_epoch": 2},
    "val_interval_3": {"stop_after": 3, "where": "callback", "val_check_interval": 3},
}


def record(framework: str, root: str, scenario: str) -> list[list[Any]]:
    """Fit under ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); returns the batches run, in
    order, as ``["train" | "val", epoch, batch_idx, global_step]``, and last ``["end", epoch, global_step]``."""
    options = dict(SCENARIOS[scenario])
    stop_after, where = options.pop("stop_after"), options.pop("where")
    chosen = pick(framework)
    seen: list[list[Any]] = []

    class Tiny(chosen.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(2, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append(["train", self.current_epoch, batch_idx, self.global_step])
            if where == "step" and self.current_epoch == 0 and batch_idx == stop_after:
                self.trainer.should_stop = True
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen.append(["val", self.current_epoch, batch_idx, self.global_step])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Stop(chosen.Callback):  # type: ignore[misc, name-defined]
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if where == "callback" and trainer.current_epoch == 0 and batch_idx == stop_after:
                trainer.should_stop = True

    def loader(n: int) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(n, 2)), batch_size=1)

    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=False, callbacks=[Stop()],
                             enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                             num_sanity_val_steps=0, default_root_dir=root, **options)
    trainer.fit(Tiny(), loader(6), loader(2))
    return [*seen, ["end", trainer.current_epoch, trainer.global_step]]
