"""A fit whose logger's writes fail for real, for ``tests/test_loggers.py``:
``python -m helpers.full_disk_logging FOLDER KIND [fill]`` (``KIND``: ``tensorboard`` or ``csv``) prints
``{"error": [class name, errno, message, path]}`` of the error the fit ended with (``null`` if none).

With ``fill`` the file system of ``FOLDER`` (a tiny tmpfs) is first filled up to 8 KiB, so the version folder is
made and the logger's first writes of metrics meet ``ENOSPC``; without it, the caller limits the file size
(``RLIMIT_FSIZE``), and they meet ``EFBIG``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.loggers import CSVLogger, TensorBoardLogger


def fill_up(folder: str, leave: int = 8192) -> None:
    """Write a file in ``folder`` until its file system is full, then give back ``leave`` bytes."""
    path = os.path.join(folder, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(path, max(0, os.path.getsize(path) - leave))


class ManyMetrics(accelkit.Module):
    """Logs 20 values every step, so the logger's files grow quickly."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.layer(batch[0]).pow(2).mean()
        for i in range(20):
            self.log(f"a_metric_with_a_long_name_{i}", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit_until_writes_fail(folder: str, kind: str) -> dict[str, Any]:
    """Fit :class:`ManyMetrics` for 30 epochs logging into ``folder``; return the error the fit ended with."""
    logger = TensorBoardLogger(folder, flush_secs=1) if kind == "tensorboard" else \
        CSVLogger(folder, flush_logs_every_n_steps=1)
    trainer = accelkit.Trainer(accelerator="cpu", max_epochs=30, logger=logger, enable_checkpointing=False,
                               enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
                               default_root_dir=folder)
    try:
        trainer.fit(ManyMetrics(), DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=4))
    except Exception as exc:
        return {"error": [type(exc).__name__, getattr(exc, "errno", None), str(exc), getattr(exc, "path", None)]}
    return {"error": None}


if __name__ == "__main__":
    folder, kind = sys.argv[1], sys.argv[2]
    if sys.argv[3:] == ["fill"]:
        fill_up(folder)
    print(json.dumps(fit_until_writes_fail(folder, kind)))
