"""(t) ``lightning.pytorch.utilities`` in a training script: ``grad_norm`` logged from ``on_before_optimizer_step``,
``rank_zero_info``/``rank_zero_warn``, a dict of training loaders (Lightning combines them, ``"max_size_cycle"``),
a ``CombinedLoader(mode="sequential")`` for validation, the ``utilities.types`` annotations, and the Module and
strategy attributes such code reads (``on_gpu``, ``print``, ``ParallelStrategy``, ``num_processes``).

Written as a Lightning user writes it; only the imports point at accelkit.
"""

import logging
import math
import warnings

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # the user's logging setup

import torch  # noqa: E402
from _cli import append, expect, ok, parse_args, read, trainer_kwargs, write  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import accelkit as L  # noqa: E402  # was: import lightning as L
from accelkit import LightningModule  # noqa: E402  # was: from lightning.pytorch import LightningModule
from accelkit.strategies import ParallelStrategy  # noqa: E402  # was: from lightning.pytorch.strategies import ...
from accelkit.utilities import CombinedLoader, grad_norm, rank_zero_info, rank_zero_warn  # noqa: E402  # was: ...
from accelkit.utilities.types import (  # noqa: E402  # was: from lightning.pytorch.utilities.types import ...
    EVAL_DATALOADERS,
    STEP_OUTPUT,
    TRAIN_DATALOADERS,
    OptimizerLRScheduler,
)

LONG, SHORT, BATCH, EPOCHS = 64, 24, 8, 2


class Records(logging.Handler):
    """Keeps this process's log lines from the rank-zero helpers (the script's instrument)."""

    def __init__(self, root, rank):
        super().__init__(level=logging.INFO)
        self.root, self.rank = root, rank

    def emit(self, record):
        if record.getMessage().startswith("epoch "):
            append(self.root, "info", self.rank, record.getMessage())


def regression(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, x @ torch.tensor([[1.0], [-1.0], [2.0], [0.5]]))


class TwoSourceModel(LightningModule):
    def __init__(self, root):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.root = root

    def forward(self, x):
        return self.layer(x)

    def train_dataloader(self) -> TRAIN_DATALOADERS:
        return {"long": DataLoader(regression(LONG, 0), batch_size=BATCH, shuffle=True),
                "short": DataLoader(regression(SHORT, 1), batch_size=BATCH)}

    def val_dataloader(self) -> EVAL_DATALOADERS:
        return CombinedLoader([DataLoader(regression(16, 2), batch_size=BATCH),
                               DataLoader(regression(8, 3), batch_size=BATCH)], mode="sequential")

    def setup(self, stage):
        logging.getLogger().addHandler(Records(self.root, self.global_rank))

    def on_train_start(self):
        strategy = self.trainer.strategy
        write(self.root, "start", self.global_rank, {
            "parallel": isinstance(strategy, ParallelStrategy),
            "num_processes": getattr(strategy, "num_processes", None), "on_gpu": self.on_gpu})
        self.print(f"training on {self.trainer.world_size} process(es)")

    def training_step(self, batch, batch_idx) -> STEP_OUTPUT:
        append(self.root, "batch", self.global_rank, sorted(batch))
        loss = sum(F.mse_loss(self(x), y) for x, y in batch.values())
        self.log("train_loss", loss)
        return loss

    def on_before_optimizer_step(self, optimizer):
        norms = grad_norm(self.layer, norm_type=2)
        self.log_dict(norms)

    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y), sync_dist=True)

    def on_train_epoch_end(self):
        rank_zero_info(f"epoch {self.current_epoch} done")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rank_zero_warn("a rank-zero warning")
        append(self.root, "warnings", self.global_rank, len(caught))

    def configure_optimizers(self) -> OptimizerLRScheduler:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    args = parse_args(__doc__)
    L.seed_everything(11)
    model = TwoSourceModel(args.root)
    trainer = L.Trainer(max_epochs=EPOCHS, num_sanity_val_steps=0, enable_progress_bar=False,
                        enable_checkpointing=False, **trainer_kwargs(args))
    trainer.fit(model)

    world = args.devices
    per_epoch = math.ceil(LONG / world / BATCH)  # "max_size_cycle": as many batches as the longest loader
    batches = read(args.root, "batch")
    expect(sorted(batches) == list(range(world)), f"ranks that trained: {sorted(batches)}")
    for rank, keys in batches.items():
        expect(keys == [["long", "short"]] * (per_epoch * EPOCHS), f"rank {rank}: batches {keys}")
    for name in ("grad_2.0_norm/weight", "grad_2.0_norm/bias", "grad_2.0_norm_total"):
        expect(name in trainer.callback_metrics, f"{name} not logged: {sorted(trainer.callback_metrics)}")
    for index in (0, 1):
        expect(f"val_loss/dataloader_idx_{index}" in trainer.callback_metrics,
               f"validation loader {index} missing from {sorted(trainer.callback_metrics)}")
    starts = read(args.root, "start")
    for rank, start in starts.items():
        expect(start["parallel"] == (args.strategy not in ("auto", "single_device")), f"rank {rank}: {start}")
        expect(start["on_gpu"] is False, f"rank {rank}: on_gpu on the CPU is {start['on_gpu']}")
        if start["parallel"]:
            expect(start["num_processes"] == world, f"rank {rank}: num_processes {start['num_processes']}")
    infos, warned = read(args.root, "info"), read(args.root, "warnings")
    expect(infos.get(0) == [f"epoch {e} done" for e in range(EPOCHS)], f"rank 0 logged {infos.get(0)}")
    expect(sorted(infos) == [0], f"rank_zero_info logged on ranks {sorted(infos)}")
    expect(warned[0] == [1] * EPOCHS and all(w == [0] * EPOCHS for r, w in warned.items() if r),
           f"rank_zero_warn warnings per rank and epoch: {warned}")
    ok("utilities")


if __name__ == "__main__":
    main()
