"""Run under elastic torchrun launchers by tests/test_elastic.py: a fit written as a user writes it for an elastic
job (``Trainer(strategy=...)`` with neither ``num_nodes`` nor ``ckpt_path``, a checkpoint every 3 steps, the
default logger's version folder), recording every sample it trains.

Each training batch appends one JSON line ``{"round", "rank", "world", "epoch", "step", "idx", "t"}`` (``round``:
the attempt, as accelkit reads it; ``step``: the global step the batch is trained in; ``idx``: the dataset indices
of the batch; ``t``: the time it started) to ``ROOT/records/<LAUNCHER>-round<N>-rank<R>-pid<P>.jsonl``,
``LAUNCHER`` being the name the test gave the launcher that started it (``ELASTIC_TEST_LAUNCHER``).
``STEP_SLEEP_S`` slows every step down. ``ELASTIC_TEST_STOP=<LAUNCHER>:<STEP>:<KILL|TERM|STOP>`` makes the process
of that launcher send itself SIGKILL, SIGTERM or SIGSTOP (a hung peer) in the first attempt's training step ``STEP``
(after recording it, before its backward); ``ELASTIC_TEST_COLLECTIVE_TIMEOUT_S`` sets the Trainer's
``collective_timeout``. ``ELASTIC_TEST_DEVICES`` (1 unless set) is the Trainer's ``devices``: 2 with STRATEGY
``ddp_fork`` is the same fit launched by accelkit instead of torchrun (the tests' never-stopped DDP reference: the
same strategy, sampler and collectives, without torchrun's launchers and fresh workers). ``FAIL_AT_STEP`` raises in
the training step of that global step (every attempt). At the end global rank zero writes the whole final weights to
``ROOT/final.pt`` (FSDP: gathered from every process) and prints ``done``.

Usage: ``torchrun ... elastic_fit.py ROOT STRATEGY`` (or ``ELASTIC_TEST_DEVICES=2 python elastic_fit.py ROOT ddp_fork``)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

import accelkit
from accelkit.environments.base import restart_attempt_of

SAMPLES = 96
BATCH = 4
EPOCHS = 2


class Indexed(Dataset):
    """Sample ``i`` is ``(i, x_i, y_i)``: the index travels with the batch, so each rank records what it trained."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(SAMPLES, 6, generator=generator)
        self.y = (self.x.sum(dim=1, keepdim=True) > 0).float()

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> Any:
        return index, self.x[index], self.y[index]


class Recorded(accelkit.Module):
    def __init__(self, root: Path) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))
        self.root = root
        self.record: Any = None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        index, x, y = batch
        if self.record is None:
            attempt = restart_attempt_of(self.trainer.strategy.cluster_environment)
            name = (f"{os.environ.get('ELASTIC_TEST_LAUNCHER', 'x')}-round{attempt}-rank{self.global_rank}-"
                    f"pid{os.getpid()}.jsonl")
            (self.root / "records").mkdir(exist_ok=True)
            self.record = open(self.root / "records" / name, "a")  # noqa: SIM115 - kept open for the fit
            self.attempt = attempt
        self.record.write(json.dumps({"round": self.attempt, "rank": self.global_rank,
                                      "world": self.trainer.world_size, "epoch": self.current_epoch,
                                      "step": self.global_step, "idx": index.tolist(), "t": time.time()}) + "\n")
        self.record.flush()
        stop = os.environ.get("ELASTIC_TEST_STOP", "::").split(":")
        if self.attempt == 0 and stop[:2] == [os.environ.get("ELASTIC_TEST_LAUNCHER"), str(self.global_step)]:
            os.kill(os.getpid(), {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}[stop[2]])
        if self.global_step == int(os.environ.get("FAIL_AT_STEP", "-1")):  # a fault in every attempt
            raise RuntimeError(f"elastic_fit fails at step {self.global_step} on purpose (FAIL_AT_STEP)")
        time.sleep(float(os.environ.get("STEP_SLEEP_S", "0")))
        return F.binary_cross_entropy_with_logits(self.net(x), y)

    def train_dataloader(self) -> Any:
        return DataLoader(Indexed(), batch_size=BATCH, shuffle=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def main(root: str, strategy: str) -> int:
    folder = Path(root)
    accelkit.seed_everything(0)
    model = Recorded(folder)
    given = os.environ.get("ELASTIC_TEST_COLLECTIVE_TIMEOUT_S")
    timeout = {"collective_timeout": float(given)} if given else {}
    devices = int(os.environ.get("ELASTIC_TEST_DEVICES", "1"))
    trainer = accelkit.Trainer(accelerator="cpu", strategy=strategy, devices=devices, max_epochs=EPOCHS,
                               default_root_dir=folder, enable_progress_bar=False, enable_model_summary=False,
                               callbacks=[accelkit.callbacks.ModelCheckpoint(every_n_train_steps=3)], **timeout)
    trainer.fit(model)
    # FSDP: the module stays sharded after fit; gathering its whole weights is a collective every process calls
    weights = trainer.strategy.full_state_dict(model) if strategy == "fsdp" else model.state_dict()
    if trainer.is_global_zero:
        torch.save({k: v.detach().cpu() for k, v in weights.items()}, folder / "final.pt")
        print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
