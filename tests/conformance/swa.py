"""Stochastic Weight Averaging as Lightning's docs enable it: ``Trainer(callbacks=[StochasticWeightAveraging(
swa_lrs=1e-2)])`` (averaging from 80 % of ``max_epochs``), on a model with batch norm.

What the docs promise, checked: from ``swa_epoch_start`` the learning rate follows ``SWALR`` (it replaces the
module's scheduler); at the end of training the module holds the running average of the weights the epochs
``swa_start`` ... ``max_epochs - 1`` started from (the reference is computed here from the weights each process
recorded); the batch-norm statistics are recomputed for those weights with a pass over the training data (the
reference is torch's ``update_bn`` over the batches every process saw); and a fit resumed from a checkpoint
written inside the averaging window ends with the same weights and statistics. Only the imports point at
accelkit.
"""

import copy
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, read, trainer_kwargs, write
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import SWALR, update_bn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import (
    Callback,  # was: from lightning.pytorch import Callback
    LightningModule,  # was: from lightning.pytorch import LightningModule
)
from accelkit.callbacks import ModelCheckpoint, StochasticWeightAveraging  # was: from lightning.pytorch.callbacks

SAMPLES, BATCH, EPOCHS = 64, 8, 10  # swa_epoch_start=0.8 -> averaging the starts of epochs 7, 8 and 9


def make_data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    x = 2 + 3 * torch.randn(SAMPLES, 5, generator=generator)
    return TensorDataset(x, torch.sin(x[:, :1]) + x[:, 1:2])


class Model(LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(11)
        self.body = nn.Sequential(nn.Linear(5, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.body(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.95)]


class Record(Callback):
    def __init__(self, root, tag):
        self.root, self.tag = root, tag
        self.starts = []

    def on_train_epoch_start(self, trainer, pl_module):
        self.starts.append({name: p.detach().flatten().tolist() for name, p in pl_module.named_parameters()})

    def on_train_end(self, trainer, pl_module):
        write(self.root, self.tag, trainer.global_rank, {
            "starts": self.starts, "swalr": isinstance(trainer.lr_scheduler_configs[0].scheduler, SWALR),
            "epoch": trainer.current_epoch, "lr": trainer.optimizers[0].param_groups[0]["lr"]})


def fit(args, tag, model, callbacks, **fit_kwargs):
    trainer = L.Trainer(max_epochs=EPOCHS, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=callbacks + [Record(args.root, tag)], **trainer_kwargs(args))
    trainer.fit(model, DataLoader(make_data(), batch_size=BATCH), **fit_kwargs)
    records = read(args.root, tag)
    expect(sorted(records) == list(range(args.devices)), f"{tag}: on_train_end ran on ranks {sorted(records)}")
    for rank, record in records.items():
        expect(record["swalr"], f"{tag}: rank {rank}'s scheduler at the end is not SWALR")
        expect(record["epoch"] == EPOCHS, f"{tag}: rank {rank} ended at epoch {record['epoch']}")
        expect(abs(record["lr"] - 1e-2) < 0.05 - 1e-2, f"{tag}: the lr {record['lr']} did not anneal towards 1e-2")
    return records


def batches_seen(world):
    """Every batch of the training data as the processes saw it (process r: samples r, r + world, ...)."""
    x, _ = make_data().tensors
    found = []
    for rank in range(world):
        shard = list(range(SAMPLES))[rank::world]
        found += [x[shard[i:i + BATCH]] for i in range(0, len(shard), BATCH)]
    return found


def main():
    args = parse_args(__doc__)
    L.seed_everything(5)
    model = Model()
    every_epoch = ModelCheckpoint(dirpath=Path(args.root) / "ckpts", filename="{epoch}", save_top_k=-1)
    records = fit(args, "swa", model, [StochasticWeightAveraging(swa_lrs=1e-2), every_epoch])

    # the final weights are the running average of the weights epochs 7, 8 and 9 started from
    model.cpu()  # after a fit in this process the module stays on the device, as in Lightning
    starts = records[0]["starts"]
    expect(len(starts) == EPOCHS, f"{len(starts)} epoch starts recorded")
    differs_from_last = False
    for name, param in model.named_parameters():
        mean = torch.tensor([start[name] for start in starts[7:]]).mean(dim=0)
        expect(torch.allclose(param.detach().flatten(), mean, atol=1e-5), f"{name} is not the average of epochs 7-9")
        differs_from_last |= not torch.allclose(mean, torch.tensor(starts[-1][name]), atol=1e-4)
    expect(differs_from_last, "the averaged weights equal the last epoch's: nothing was averaged")

    # the batch-norm statistics are those of the averaged weights over the training data
    expected = copy.deepcopy(model)
    update_bn(batches_seen(args.devices), expected)
    norm, want = model.body[1], expected.body[1]
    expect(torch.allclose(norm.running_mean, want.running_mean, atol=1e-4), "running_mean not recomputed")
    expect(torch.allclose(norm.running_var, want.running_var, rtol=1e-4, atol=1e-4), "running_var not recomputed")
    expect(int(norm.num_batches_tracked) == SAMPLES // BATCH, f"{int(norm.num_batches_tracked)} batches tracked")
    expect(norm.momentum == 0.1, f"batch-norm momentum left at {norm.momentum}")

    # resume from the checkpoint of epoch 8 (two weights averaged): the same average, the same statistics
    ckpt = Path(args.root) / "ckpts" / "epoch=8.ckpt"
    expect(ckpt.is_file(), f"no checkpoint {ckpt}")
    resumed = Model()
    fit(args, "resumed", resumed, [StochasticWeightAveraging(swa_lrs=1e-2)], ckpt_path=ckpt)
    resumed.cpu()
    for (name, value), again in zip(model.state_dict().items(), resumed.state_dict().values(), strict=True):
        expect(torch.allclose(value.float(), again.float(), atol=1e-5), f"{name}: the resumed fit ended elsewhere")
    ok("swa")


if __name__ == "__main__":
    main()
