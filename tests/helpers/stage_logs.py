"""What a ``validate`` or ``test`` run with no ``fit`` before it leaves in a ``CSVLogger``'s folder, recorded the same
way on accelkit's Trainer and on Lightning's (``tests/test_loggers.py`` compares them): the module saves its
hyper-parameters and logs one value per batch; the record is :func:`helpers.logger_steps.csv_files`' (the files, the
header of ``metrics.csv``, the text of ``hparams.yaml``).

It imports neither framework until :func:`record` picks one (a Lightning run imports Lightning alone).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs
from helpers.logger_steps import csv_files

#: the stages run on their own, by name
SCENARIOS: dict[str, dict[str, Any]] = {"validate": {}, "test": {}}


def record(framework: str, root: str, scenario: str) -> dict[str, str]:
    """Run ``trainer.<scenario>`` (``"validate"`` or ``"test"``) of a fresh module with a ``CSVLogger`` in ``root``
    under ``framework`` (``"accelkit"`` or ``"lightning"``); returns :func:`csv_files` of the logger's folder."""
    chosen = pick(framework)

    class Saved(linear_module(chosen.Module, lr=0.1)):  # type: ignore[misc]
        def __init__(self, width: int = 4, label: str = "net") -> None:
            super().__init__()
            self.save_hyperparameters()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log(f"{scenario}_loss", F.mse_loss(self.layer(batch[0]), batch[1]))

        test_step = validation_step

    logger = chosen.loggers.CSVLogger(root)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, logger=logger, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False)
    data = DataLoader(random_pairs(8, torch.Generator().manual_seed(0)), batch_size=4)
    getattr(trainer, scenario)(Saved(), data, verbose=False)
    return csv_files(logger.log_dir)
