"""(k) Run-length arguments: ``fast_dev_run`` (``True`` and an int), ``limit_{train,val,test,predict}_batches``
(counts and fractions), ``val_check_interval`` (fraction and int), ``num_sanity_val_steps`` and
``log_every_n_steps``.

Every count below is per process, as in Lightning. Written as a Lightning user writes it; only the imports
point at accelkit.
"""

import csv
from collections import Counter
from pathlib import Path

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule
from accelkit.loggers import CSVLogger  # was: from lightning.pytorch.loggers import CSVLogger

BATCH = 4


def data(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=generator)
    return TensorDataset(x, x[:, :1] - x[:, 1:])


class CountingModel(LightningModule):
    def __init__(self, root: str, tag: str):
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.root, self.tag = root, tag

    def _note(self, what: str):
        append(self.root, self.tag, self.global_rank, what)

    def training_step(self, batch, batch_idx):
        self._note("train")
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self._note("sanity" if self.trainer.sanity_checking else "val")
        x, y = batch
        self.log("val_loss", F.mse_loss(self.layer(x), y))

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self._note(f"val_end@{self.trainer.global_step}")

    def test_step(self, batch, batch_idx):
        self._note("test")

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        self._note("predict")
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def counts(root: str, tag: str, world: int) -> Counter:
    records = read(root, tag)
    expect(sorted(records) == list(range(world)), f"{tag}: ran on ranks {sorted(records)}")
    per_rank = [Counter(records[rank]) for rank in range(world)]
    expect(all(c == per_rank[0] for c in per_rank), f"{tag}: ranks ran differently: {per_rank}")
    return per_rank[0]


def main():
    args = parse_args(__doc__)
    L.seed_everything(2)
    world = args.devices
    base = trainer_kwargs(args)
    train = DataLoader(data(96, 0), batch_size=BATCH)  # 24 batches on one process, 12 on each of two
    val = DataLoader(data(32, 1), batch_size=BATCH)  # 8 batches on one process, 4 on each of two

    def trainer(name: str, **kwargs) -> "L.Trainer":
        folder = Path(args.root) / name
        return L.Trainer(enable_progress_bar=False, logger=CSVLogger(folder),
                         **{**base, "default_root_dir": str(folder)}, **kwargs)

    # fast_dev_run=True: one training and one validation batch, no sanity check, nothing written
    fdr = trainer("fast_dev_run", fast_dev_run=True, max_epochs=5)
    fdr.fit(CountingModel(args.root, "fdr"), train, val)
    seen = counts(args.root, "fdr", world)
    expect(seen == Counter({"train": 1, "val": 1, "val_end@1": 1}), f"fast_dev_run=True ran {dict(seen)}")
    written = [p.name for p in (Path(args.root) / "fast_dev_run").rglob("*") if p.suffix in (".ckpt", ".csv")]
    expect(not written, f"fast_dev_run wrote {written}")

    fdr3 = trainer("fast_dev_run_3", fast_dev_run=3)
    fdr3.fit(CountingModel(args.root, "fdr3"), train, val)
    seen = counts(args.root, "fdr3", world)
    expect(seen == Counter({"train": 3, "val": 3, "val_end@3": 1}), f"fast_dev_run=3 ran {dict(seen)}")

    # limits and a fractional val_check_interval: validate after 3 and after 6 of 6 batches, each epoch
    limited = trainer("limits", max_epochs=2, limit_train_batches=6, limit_val_batches=0.5, val_check_interval=0.5,
                      num_sanity_val_steps=0, log_every_n_steps=2, enable_checkpointing=False)
    limited.fit(CountingModel(args.root, "limits"), train, val)
    seen = counts(args.root, "limits", world)
    val_batches = 8 // world // 2
    expect(seen == Counter({"train": 12, "val": 4 * val_batches, "val_end@3": 1, "val_end@6": 1, "val_end@9": 1,
                            "val_end@12": 1}), f"limits ran {dict(seen)}")
    metrics = list((Path(args.root) / "limits").rglob("metrics.csv"))
    expect(len(metrics) == 1, f"metrics files {metrics}")
    with open(metrics[0]) as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("train_loss")]
    expect(len(rows) == 12 // 2, f"log_every_n_steps=2 over 12 steps wrote {len(rows)} train_loss rows")

    # an int val_check_interval counts batches; sanity steps run before training
    by_batches = trainer("interval", max_epochs=1, limit_train_batches=8, val_check_interval=4, num_sanity_val_steps=1,
                         enable_checkpointing=False)
    by_batches.fit(CountingModel(args.root, "interval"), train, val)
    seen = counts(args.root, "interval", world)
    expect(seen == Counter({"sanity": 1, "train": 8, "val": 2 * (8 // world), "val_end@4": 1, "val_end@8": 1}),
           f"val_check_interval=4 ran {dict(seen)}")

    evaluator = trainer("evaluate", limit_test_batches=2, limit_predict_batches=3)
    model = CountingModel(args.root, "evaluate")
    evaluator.test(model, dataloaders=val)
    predictions = evaluator.predict(model, dataloaders=val)
    seen = counts(args.root, "evaluate", world)
    expect(seen == Counter({"test": 2, "predict": 3}), f"limit_test/predict_batches ran {dict(seen)}")
    expect(len(predictions) == 3, f"predict returned {len(predictions)} batches with limit_predict_batches=3")
    ok("limits")


if __name__ == "__main__":
    main()
