"""The warning a fit gives when ``max_epochs`` is not set and nothing else bounds it (it then stops after 1000
epochs), recorded the same way on accelkit's Trainer and on Lightning's (``tests/test_trainer_arguments.py``
compares them).

A scenario is a dict of Trainer options, plus ``"timer"`` (a ``Timer`` callback of that duration). Each fit runs
one epoch of 2 batches (a callback stops it), with every warning recorded.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "nothing_bounds": {},
    "max_epochs_given": {"max_epochs": 5},
    "max_epochs_unlimited": {"max_epochs": -1},
    "max_steps": {"max_steps": 50},
    "max_time": {"max_time": "00:01:00:00"},
    "timer_callback": {"timer": "00:01:00:00"},
    "fast_dev_run": {"fast_dev_run": True},
}


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Fit under ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); returns the warnings that
    name ``max_epochs`` (each as: a ``UserWarning``?, says 1000?, names ``max_epochs=-1``?, the file it is located
    in), the epoch limit after the fit and the epochs run."""
    options = dict(SCENARIOS[scenario])
    chosen = pick(framework)
    timer = options.pop("timer", None)

    class Stop(chosen.Callback):  # type: ignore[misc, name-defined]
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            trainer.should_stop = True

    callbacks = [Stop()] + ([chosen.callbacks.Timer(duration=timer)] if timer else [])
    trainer = chosen.Trainer(accelerator="cpu", devices=1, logger=False, callbacks=callbacks,
                             enable_model_summary=False, enable_progress_bar=False, enable_checkpointing=False,
                             num_sanity_val_steps=0, default_root_dir=root, **options)
    data = DataLoader(random_pairs(4, torch.Generator().manual_seed(0)), batch_size=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(linear_module(chosen.Module, lr=0.05)(), data)
    seen = [[issubclass(w.category, UserWarning), "1000" in str(w.message), "max_epochs=-1" in str(w.message),
             os.path.basename(w.filename)] for w in caught if "max_epochs" in str(w.message)]
    return {"warnings": seen, "max_epochs": trainer.max_epochs, "epochs": trainer.current_epoch}
