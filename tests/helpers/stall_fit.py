"""Two-process fits (``ddp_spawn`` or ``ddp_fork``) where the ranks disagree, for the bounded-wait tests:
``python stall_fit.py ROOT MODE [COLLECTIVE_TIMEOUT [STRATEGY]]`` (12 s and ``ddp_spawn`` by default) with MODE
``stuck`` (rank 1 sleeps for an hour in batch 1), ``none`` (rank 1's training_step returns None once), ``uneven``
(rank 0 has 4 batches per epoch, rank 1 has 3) or ``stop0``/``stop1`` (rank 0 or 1 writes ``stopme-<rank>`` holding
its pid at batch 4, step 4, and waits there for the test to SIGSTOP it). A test that runs the fit from its own
process (the launcher) imports :func:`make_trainer` and :class:`Disagreeing`."""

import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

import accelkit

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:  # run as a script: the helpers are the package of the tests folder, never top-level
    sys.path.insert(0, TESTS)  # modules (a top-level ``models`` would shadow a test project's ``models.py``)
from helpers.models import RegressionModule, WeightDump, regression_data  # noqa: E402


class Disagreeing(RegressionModule):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 1:
            if self.mode == "stuck":
                time.sleep(3600)
            if self.mode == "none":
                return None
        if self.mode == f"stop{self.global_rank}" and batch_idx == 4:
            (Path(self.trainer.default_root_dir) / f"stopme-{self.global_rank}").write_text(str(os.getpid()))
            time.sleep(3600)
        return super().training_step(batch, batch_idx)

    def train_dataloader(self):
        if self.mode.startswith("stop"):  # 8 batches per rank
            return DataLoader(regression_data(32), batch_size=2)
        if self.mode != "uneven":
            return super().train_dataloader()
        rank = self.global_rank
        return DataLoader(regression_data(32 if rank == 0 else 24, seed=rank), batch_size=8)


def make_trainer(root: str | os.PathLike, mode: str, timeout: float = 12,
                 strategy: str = "ddp_spawn") -> accelkit.Trainer:
    """The two-process trainer of ``mode`` (``timeout``: the collective timeout in seconds; ``strategy``:
    ``ddp_spawn`` or ``ddp_fork``)."""
    return accelkit.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=2, logger=False,
                            enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                            default_root_dir=root, collective_timeout=timeout, limit_val_batches=0,
                            use_distributed_sampler=mode != "uneven", callbacks=[WeightDump(root)])


if __name__ == "__main__":
    root, mode = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    trainer = make_trainer(root, mode, float(sys.argv[3]) if len(sys.argv) > 3 else 12,
                           sys.argv[4] if len(sys.argv) > 4 else "ddp_spawn")
    trainer.fit(Disagreeing(mode))
    print(f"done global_step={trainer.global_step}")
