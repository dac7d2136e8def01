"""(t) A user project's DataModule, module and script (SebastianGonzalez2000/LightningHydraBareBones: ``src/train.py``,
``src/models/lit_module.py``, ``src/data/lit_mnist_datamodule.py``): fit and test with a DataModule whose ``setup``
splits by stage, then ``LitModule.load_from_checkpoint(path, model=module.model)`` and the encoder used alone.

Stand-ins: hydra's ``instantiate`` is replaced by the constructors with the configuration's values, MNIST by random
28x28 images, and the project's hard-coded ``lightning_logs/version_21/...`` checkpoint path by the checkpoint
callback's ``best_model_path``. Only the imports point at accelkit.
"""

import torch
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn, optim, utils

import accelkit as pl  # was: import lightning.pytorch as pl
from accelkit import (
    LightningDataModule,  # was: pl.LightningDataModule
    LightningModule,  # was: pl.LightningModule
)


class AutoEncoder(nn.Module):
    def __init__(self, input_size, e_l1_out, e_l2_out, d_l1_out):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(input_size, e_l1_out), nn.ReLU(), nn.Linear(e_l1_out, e_l2_out))
        self.decoder = nn.Sequential(nn.Linear(e_l2_out, d_l1_out), nn.ReLU(), nn.Linear(d_l1_out, input_size))

    def forward(self, x):
        x = x.view(x.size(0), -1)
        return nn.functional.mse_loss(self.decoder(self.encoder(x)), x)


class LitModule(LightningModule):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.model(x)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", self.model(x), sync_dist=True)

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", self.model(x), sync_dist=True)

    def configure_optimizers(self):
        return optim.Adam(self.parameters(), lr=1e-3)


class LitMNISTDataModule(LightningDataModule):
    def __init__(self, batch_size=32):
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage):
        generator = torch.Generator().manual_seed(0)
        full = utils.data.TensorDataset(torch.rand(600, 1, 28, 28, generator=generator), torch.zeros(600))
        if stage == "fit":
            self.mnist_train, self.mnist_val = utils.data.random_split(
                full, [550, 50], generator=torch.Generator().manual_seed(42))
        if stage == "test":
            self.mnist_test = utils.data.TensorDataset(torch.rand(100, 1, 28, 28, generator=generator),
                                                       torch.zeros(100))

    def train_dataloader(self):
        return utils.data.DataLoader(self.mnist_train, batch_size=self.batch_size)

    def val_dataloader(self):
        return utils.data.DataLoader(self.mnist_val, batch_size=self.batch_size)

    def test_dataloader(self):
        return utils.data.DataLoader(self.mnist_test, batch_size=self.batch_size)


def main():
    args = parse_args(__doc__)
    torch.manual_seed(0)
    datamodule = LitMNISTDataModule(batch_size=32)
    module = LitModule(AutoEncoder(784, 64, 3, 64))
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=10, enable_progress_bar=False, **trainer_kwargs(args))
    trainer.fit(module, datamodule=datamodule)
    tested = trainer.test(model=module, datamodule=datamodule, verbose=False)
    expect(len(tested) == 1 and tested[0]["test_loss"] > 0, f"test results: {tested}")

    checkpoint = trainer.checkpoint_callback.best_model_path
    expect(checkpoint.endswith(f"epoch=0-step={trainer.global_step}.ckpt"), f"best checkpoint: {checkpoint!r}")
    module = LitModule.load_from_checkpoint(checkpoint, model=module.model)
    encoder = module.model.encoder
    encoder.eval()
    embeddings = encoder(torch.rand(4, 28 * 28, device=module.device))
    expect(tuple(embeddings.shape) == (4, 3), f"embeddings of shape {tuple(embeddings.shape)}")
    ok("user_hydra_autoencoder")


if __name__ == "__main__":
    main()
