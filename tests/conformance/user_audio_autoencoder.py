"""(s) A user project that reaches Lightning's classes through the package attribute (AntoineBch29/simulation-audio-
project, ``train.py`` and ``Model/LightningModule.py``): with the package ``lightning`` imported as ``L``,
``L.pytorch.loggers.TensorBoardLogger(save_dir="Logs/")`` and ``L.pytorch.callbacks.ModelCheckpoint`` whose
``dirpath`` is the logger's ``log_dir`` and whose file name holds two logged metrics.

Stand-ins: the audio data are random tensors, the encoder/decoder small MLPs, 2 epochs instead of 5, and the
checkpoint callback is passed to the Trainer (the project builds it and forgets to). Only the imports point at
accelkit; ``L.pytorch...`` is left as the project writes it.
"""

import re
from pathlib import Path

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn, optim, utils

import accelkit as L  # was: import lightning as L
from accelkit import (
    LightningDataModule,  # was: pl.LightningDataModule
    LightningModule,  # was: import lightning.pytorch as pl; pl.LightningModule
)


class Module(LightningModule):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    def _loss(self, batch):
        x, y = batch
        x = x.view(x.size(0), -1)
        return nn.functional.mse_loss(self.decoder(self.encoder(x)), x)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("val_loss", loss, sync_dist=True)
        self.log("val_snr", -10 * torch.log10(loss), sync_dist=True)

    def configure_optimizers(self):
        return optim.Adam(self.parameters(), lr=1e-3)


class MyDataModule(LightningDataModule):
    def __init__(self, batch_size, num_workers):
        super().__init__()
        self.batch_size, self.num_workers = batch_size, num_workers

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        self.train = utils.data.TensorDataset(torch.randn(128, 64, generator=generator), torch.zeros(128))
        self.val = utils.data.TensorDataset(torch.randn(32, 64, generator=generator), torch.zeros(32))

    def train_dataloader(self):
        return utils.data.DataLoader(self.train, batch_size=self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self):
        return utils.data.DataLoader(self.val, batch_size=self.batch_size, num_workers=self.num_workers)


def main():
    args = parse_args(__doc__)
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 4))
    decoder = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 64))
    tb_logger = L.pytorch.loggers.TensorBoardLogger(save_dir=str(Path(args.root) / "Logs"))
    model = Module(encoder, decoder)
    datamodule = MyDataModule(batch_size=32, num_workers=0)
    checkpoint_callback = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=tb_logger.log_dir, filename="{epoch}-{val_loss:.2f}-{val_snr:.2f}", monitor="val_snr", mode="max")
    trainer = L.Trainer(max_epochs=2, logger=tb_logger, callbacks=[checkpoint_callback], enable_progress_bar=False,
                        **trainer_kwargs(args))
    trainer.fit(model, datamodule)

    saved = sorted(p.name for p in Path(tb_logger.log_dir).glob("*.ckpt"))
    expect(len(saved) == 1 and re.fullmatch(r"epoch=1-val_loss=\d+\.\d\d-val_snr=-?\d+\.\d\d\.ckpt", saved[0]),
           f"checkpoints in the logger's folder: {saved}")
    events = list((Path(args.root) / "Logs").rglob("events.out.tfevents*"))
    expect(events != [], "the TensorBoard logger wrote no event file")
    ok("user_audio_autoencoder")


if __name__ == "__main__":
    main()
