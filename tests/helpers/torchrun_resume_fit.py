"""Run under ``torchrun --nproc-per-node 2 --max-restarts 2`` by tests/test_torchrun_restarts.py: the exact-resume
fit of helpers/resume_fit.py (shuffled loader, dropout, Adam, a per-step scheduler) with strategy="ddp", a
checkpoint every 4 steps and ``ckpt_path="last"`` on every attempt, as a preemptible job runs it.

Each worker prints ``rank R pid P attempt A starts at step S`` when training starts; rank 0 prints ``step N``
after every batch (``STEP_SLEEP_S`` slows the steps down; ``RESTARTED_RANK_1_DELAY_S`` delays a restarted rank 1) and,
at the end, writes ``ROOT/final.pt`` and prints
``done``. Usage: ``torchrun ... torchrun_resume_fit.py ROOT``
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

import accelkit
from helpers.resume_fit import DropoutNet, PrintSteps, make_trainer


class ReportStart(accelkit.Callback):
    """Says which process trains, in which attempt of torchrun, from which step."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
        sys.stdout.write(f"rank {trainer.global_rank} pid {os.getpid()} attempt {attempt} starts at step "
                         f"{trainer.global_step}\n")
        sys.stdout.flush()


def main(root: str) -> int:
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0" and os.environ.get("RANK") == "1":
        # a restarted rank 1 that joins late (as on a loaded machine): rank 0 then reaches the process group's
        # rendezvous first, where the keys the killed attempt wrote must not be taken for rank 1's
        time.sleep(float(os.environ.get("RESTARTED_RANK_1_DELAY_S", "0")))
    accelkit.seed_everything(0)
    model = DropoutNet()
    trainer = make_trainer(root, "ddp", 2, epochs=3, every=4, callbacks=[ReportStart(), PrintSteps()])
    trainer.fit(model, ckpt_path="last")
    if trainer.is_global_zero:
        torch.save(model.state_dict(), Path(root) / "final.pt")
        sys.stdout.write("done\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
