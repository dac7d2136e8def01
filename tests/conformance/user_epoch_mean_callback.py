"""(u) A user project's callback that logs through the module (ZakariaPZ/Autoencoders: ``main.py``, ``autoencoders.py``,
``callbacks.py``): the module appends each step's loss to ``training_step_outputs``; the callback's
``on_train_epoch_end`` stacks them, logs the mean with ``pl_module.log`` and clears the list; the script then saves a
checkpoint with ``trainer.save_checkpoint``. A validation loader is passed to a module without ``validation_step``.

Stand-ins: MNIST becomes random 1x28x28 images (320 of them), 2 epochs instead of 5. Only the imports point at
accelkit.
"""

from pathlib import Path

import torch
from _cli import append, expect, ok, parse_args, read, trainer_kwargs
from torch import nn
from torch.utils import data

import accelkit as pl  # was: import lightning as pl
from accelkit import LightningModule  # was: pl.LightningModule


class LossCallback(pl.Callback):
    def __init__(self, root):
        self.root = root

    def on_train_epoch_end(self, trainer, pl_module):
        epoch_mean = torch.stack(pl_module.training_step_outputs).mean()
        pl_module.log("training_epoch_mean", epoch_mean)
        pl_module.training_step_outputs.clear()
        append(self.root, "means", trainer.global_rank, float(epoch_mean))


def conv(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, 2, 1), nn.BatchNorm2d(o), nn.ReLU())


def deconv(i, o, op, act=nn.ReLU):
    return nn.Sequential(nn.ConvTranspose2d(i, o, 3, 2, 1, output_padding=op), nn.BatchNorm2d(o), act())


class ConvAutoEncoder(LightningModule):
    def __init__(self, latent_dim=8):
        super().__init__()
        self.training_step_outputs = []
        self.encoder = nn.Sequential(conv(1, 16), conv(16, 32), conv(32, 64), nn.Flatten(),
                                     nn.Linear(64 * 4 * 4, latent_dim))
        self.decoder = nn.Sequential(nn.Linear(latent_dim, 64 * 4 * 4), nn.Unflatten(1, (64, 4, 4)),
                                     deconv(64, 32, 0), deconv(32, 16, 1), deconv(16, 1, 1, nn.Sigmoid))

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self(x), x)
        self.training_step_outputs.append(loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def main():
    args = parse_args(__doc__)
    generator = torch.Generator().manual_seed(0)
    train_dataset = data.TensorDataset(torch.rand(320, 1, 28, 28, generator=generator), torch.zeros(320))
    pl.seed_everything(42)
    train_set, val_set = data.random_split(train_dataset, [256, 64])
    train_loader = data.DataLoader(train_set, batch_size=64, shuffle=True)
    val_loader = data.DataLoader(val_set, batch_size=64, shuffle=False)
    model = ConvAutoEncoder()
    trainer = pl.Trainer(max_epochs=2, callbacks=[LossCallback(args.root)], enable_progress_bar=False,
                         **trainer_kwargs(args))
    trainer.fit(model, train_dataloaders=train_loader, val_dataloaders=val_loader)
    checkpoint_path = Path(args.root) / "my_model.ckpt"
    trainer.save_checkpoint(checkpoint_path)

    means = read(args.root, "means")
    expect(sorted(means) == list(range(args.devices)) and all(len(m) == 2 for m in means.values()),
           f"epoch means per rank: {means}")
    expect("training_epoch_mean" in trainer.callback_metrics, f"callback_metrics: {sorted(trainer.callback_metrics)}")
    saved = torch.load(checkpoint_path, weights_only=True)
    expect(saved["epoch"] == 2 and "encoder.0.0.weight" in saved["state_dict"], f"checkpoint: {sorted(saved)}")
    ok("user_epoch_mean_callback")


if __name__ == "__main__":
    main()
