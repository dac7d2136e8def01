"""Run by tests/test_worker_liveness.py in a subprocess: a 2-process ddp_spawn fit of a 400,000-row TensorDataset
whose script cannot be imported by the spawned workers.

Usage: ``python never_starts_fit.py FOLDER MODE``. In the workers (which re-import this script first), MODE
``raise`` raises at the script's top level; MODE ``hang`` writes ``FOLDER/importing-<pid>`` and sleeps, so the
workers never start the run. The launching process prints ``CAUGHT <type>`` and the error's message.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from helpers.models import RegressionModule

if __name__ == "__mp_main__":  # a spawned worker importing this script (the caller's copy is __main__)
    if sys.argv[2] == "raise":
        raise RuntimeError("this script refuses to be imported by a worker process")
    (Path(sys.argv[1]) / f"importing-{os.getpid()}").touch()
    time.sleep(3600)


def main(folder: str) -> int:
    rows = 400_000
    data = TensorDataset(torch.randn(rows, 4), torch.randn(rows, 1))  # sent to every worker: about 8 MB
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, default_root_dir=folder)
    print("FITTING", flush=True)
    try:
        trainer.fit(RegressionModule(), DataLoader(data, batch_size=1000))
    except BaseException as exc:  # report whatever came back (a TrainingInterrupted is a KeyboardInterrupt)
        print(f"CAUGHT {type(exc).__module__}.{type(exc).__name__}")
        print(str(exc))
        return 3
    print("NO ERROR")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
