"""(r) A user project's callback (pbmstrk/arxiv-generator, ``title_generator/callbacks/printing_callback.py``): it reads
``trainer.callback_metrics[monitor]`` in ``on_validation_end``, which also runs in the sanity check, where Lightning
already holds the check's ``val_loss`` there (and clears it before training). The title generator is replaced by a
small regression; the callback is the project's, logging through ``logging`` and here also recording what it saw.
Only the imports point at accelkit.
"""

import logging

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as pl  # was: import lightning.pytorch as pl
from accelkit import LightningModule  # was: pl.LightningModule
from accelkit.callbacks import Callback  # was: from lightning.pytorch.callbacks import Callback

log = logging.getLogger(__name__)


class PrintingCallback(Callback):
    def __init__(self, monitor, root):
        self.monitor, self.root = monitor, root

    def on_validation_end(self, trainer, pl_module):
        metrics = trainer.callback_metrics
        epoch = trainer.current_epoch
        log.info("Epoch: %d \t Step %d", epoch, trainer.global_step)
        log.info("Val loss: %.4f", metrics[self.monitor])
        append(self.root, "seen", trainer.global_rank, [trainer.sanity_checking, epoch, float(metrics[self.monitor])])

    def on_train_epoch_start(self, trainer, pl_module):
        append(self.root, "cleared", trainer.global_rank, self.monitor not in trainer.callback_metrics)


class Net(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main():
    args = parse_args(__doc__)
    logging.basicConfig(level=logging.INFO)
    generator = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator))
    trainer = pl.Trainer(max_epochs=2, callbacks=[PrintingCallback("val_loss", args.root)], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, **trainer_kwargs(args))
    trainer.fit(Net(), DataLoader(data, batch_size=16), DataLoader(data, batch_size=16))
    seen = read(args.root, "seen")
    expect(sorted(seen) == list(range(args.devices)), f"ranks that validated: {sorted(seen)}")
    for rank, calls in seen.items():
        expect([c[:2] for c in calls] == [[True, 0], [False, 0], [False, 1]], f"rank {rank} calls: {calls}")
    cleared = read(args.root, "cleared")
    expect(all(flags[0] for flags in cleared.values()), f"the sanity check's val_loss outlived it: {cleared}")
    ok("user_printing_callback")


if __name__ == "__main__":
    main()
