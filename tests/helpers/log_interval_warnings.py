"""The warning a fit gives when its training epoch has fewer batches than ``log_every_n_steps`` (the loggers then
see a step's values less than once an epoch), recorded the same way on accelkit's Trainer and on Lightning's
(``tests/test_trainer_arguments.py`` compares them).

A scenario is a dict of Trainer options, plus ``"batches"`` (the training loader's length; 4 unless given). Each
fit runs one epoch with a CSV logger in ``root`` unless the scenario gives ``logger``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs

#: the scenarios the tests compare, by name
SCENARIOS: dict[str, dict[str, Any]] = {
    "fewer_batches": {},
    "as_many_batches": {"log_every_n_steps": 4},
    "more_batches": {"log_every_n_steps": 3},
    "limited_below": {"limit_train_batches": 2, "log_every_n_steps": 3},
    "no_logger": {"logger": False},
    "fast_dev_run": {"fast_dev_run": True},
    "no_length": {"batches": None},
}


def record(framework: str, root: str, scenario: str) -> list[list[Any]]:
    """Fit one epoch under ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); returns the
    warnings that name ``log_every_n_steps``, each as: a ``UserWarning``?, the interval named
    (``log_every_n_steps=N``), the epoch's batches named."""
    options = dict(SCENARIOS[scenario])
    chosen = pick(framework)
    batches = options.pop("batches", 4)
    if "logger" not in options:
        options["logger"] = chosen.loggers.CSVLogger(root)
    data: Any = DataLoader(random_pairs(2 * (batches or 4), torch.Generator().manual_seed(0)), batch_size=2)
    if batches is None:
        data = _Unsized(data)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=1, enable_model_summary=False,
                             enable_progress_bar=False, enable_checkpointing=False, num_sanity_val_steps=0,
                             default_root_dir=root, **options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(linear_module(chosen.Module, lr=0.05)(), data)
    interval = options.get("log_every_n_steps", 50)
    counted = options.get("limit_train_batches", batches)
    return [[issubclass(w.category, UserWarning), f"log_every_n_steps={interval}" in str(w.message),
             f"({counted})" in str(w.message) or f" {counted} batches" in str(w.message)]
            for w in caught if "log_every_n_steps" in str(w.message)]


class _Unsized:
    """A loader without a length (an iterable that only iterates)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)
