"""(m) ``BasePredictionWriter``: Lightning's "multi-device inference" example, ``trainer.predict(...,
return_predictions=False)`` with a writer that saves, per rank, its predictions and their ``batch_indices`` at
the end of the epoch, and a second writer that saves every batch as it comes.

Each sample's prediction is its own dataset index times two, so the files say which samples each rank handled:
every rank wrote its own shard, the shards are disjoint, and together they cover the dataset. Written as a
Lightning user writes it; only the imports point at accelkit.
"""

import os
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, Dataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule
from accelkit.callbacks import BasePredictionWriter  # was: from lightning.pytorch.callbacks import ...

SAMPLES, BATCH = 30, 4


class IndexDataset(Dataset):
    def __len__(self):
        return SAMPLES

    def __getitem__(self, index):
        return torch.tensor([float(index)])


class DoublingModel(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(1, 1)

    def predict_step(self, batch, batch_idx):
        return batch * 2


class CustomWriter(BasePredictionWriter):
    def __init__(self, output_dir, write_interval):
        super().__init__(write_interval)
        self.output_dir = output_dir

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        folder = os.path.join(self.output_dir, str(dataloader_idx))
        os.makedirs(folder, exist_ok=True)
        torch.save({"prediction": prediction, "batch_indices": batch_indices},
                   os.path.join(folder, f"rank{trainer.global_rank}-batch{batch_idx}.pt"))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        # this will create N (num processes) files in `output_dir` each containing
        # the predictions of its respective rank
        torch.save(predictions, os.path.join(self.output_dir, f"predictions_{trainer.global_rank}.pt"))
        # optionally, you can also save `batch_indices` to get the information about the data index
        # from your prediction data
        torch.save(batch_indices, os.path.join(self.output_dir, f"batch_indices_{trainer.global_rank}.pt"))


def check_shards(shards, world_size):
    """Each rank's indices are its own, the ranks' indices are disjoint and cover the dataset."""
    expect(sorted(shards) == list(range(world_size)), f"shards from ranks {sorted(shards)}")
    every = [i for indices in shards.values() for i in indices]
    expect(sorted(every) == list(range(SAMPLES)), f"the shards do not cover the dataset once: {sorted(every)}")
    if world_size > 1:
        expect(all(len(indices) < SAMPLES for indices in shards.values()), "a rank predicted everything")


def main():
    args = parse_args(__doc__)
    epoch_dir, batch_dir = Path(args.root) / "epoch", Path(args.root) / "batch"
    epoch_dir.mkdir()
    batch_dir.mkdir()
    writers = [CustomWriter(output_dir=str(epoch_dir), write_interval="epoch"),
               CustomWriter(output_dir=str(batch_dir), write_interval="batch")]
    trainer = L.Trainer(callbacks=writers, logger=False, enable_progress_bar=False, **trainer_kwargs(args))
    returned = trainer.predict(DoublingModel(), DataLoader(IndexDataset(), batch_size=BATCH),
                               return_predictions=False)
    expect(returned is None, f"return_predictions=False returned {type(returned).__name__}")

    # the epoch writer: per rank, the predictions of its batches and per batch the dataset indices
    shards = {}
    for rank in range(args.devices):
        predictions = torch.load(epoch_dir / f"predictions_{rank}.pt")
        batch_indices = torch.load(epoch_dir / f"batch_indices_{rank}.pt")
        expect(len(batch_indices) == 1, f"one loader, batch_indices has {len(batch_indices)} lists")
        per_batch = batch_indices[0]
        expect(len(predictions) == len(per_batch), f"{len(predictions)} predictions, {len(per_batch)} index lists")
        for prediction, indices in zip(predictions, per_batch, strict=True):
            expect(prediction.flatten().tolist() == [2.0 * i for i in indices],
                   f"rank {rank}: prediction {prediction.flatten().tolist()} is not of samples {indices}")
        shards[rank] = [i for indices in per_batch for i in indices]
    check_shards(shards, args.devices)

    # the batch writer: one file per batch and rank, written as the batches came
    files = sorted((batch_dir / "0").glob("*.pt"))
    batch_shards = {}
    for path in files:
        rank = int(path.name.split("-")[0][4:])
        saved = torch.load(path)
        expect(saved["prediction"].flatten().tolist() == [2.0 * i for i in saved["batch_indices"]],
               f"{path.name}: prediction does not match its batch_indices")
        batch_shards.setdefault(rank, []).extend(saved["batch_indices"])
    check_shards(batch_shards, args.devices)
    expect({r: sorted(v) for r, v in batch_shards.items()} == {r: sorted(v) for r, v in shards.items()},
           "the batch and epoch writers saw different shards")
    ok("prediction_writer")


if __name__ == "__main__":
    main()
