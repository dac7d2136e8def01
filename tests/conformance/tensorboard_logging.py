"""The default logger as notebook programs use it: ``self.logger.experiment`` is TensorBoard's ``SummaryWriter``.

A Lightning program of the GAN-example kind: it logs an image grid through ``self.logger.experiment.add_image``,
asks for the model graph (``trainer.logger._log_graph = True``, as users write it), and reads ``hparams.yaml`` back
from the logger's version folder; the default checkpoint is in that folder's ``checkpoints``. It then runs validate,
test, validate, test on the same Trainer. Written as a Lightning user writes it; only the imports point at
accelkit.
"""

from pathlib import Path

import torch
import yaml
from _cli import expect, ok, parse_args, trainer_kwargs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit as L  # was: import lightning as L
from accelkit import LightningModule  # was: from lightning.pytorch import LightningModule


class LitDecoder(LightningModule):
    def __init__(self, latent: int = 4, side: int = 6, lr: float = 0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(latent, 16), nn.ReLU(), nn.Linear(16, side * side), nn.Sigmoid())
        self.example_input_array = torch.zeros(2, latent)

    def forward(self, z):
        return self.net(z).view(-1, 1, self.hparams.side, self.hparams.side)

    def training_step(self, batch, batch_idx):
        z, target = batch
        loss = nn.functional.mse_loss(self(z), target)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        z, target = batch
        self.log("val_loss", nn.functional.mse_loss(self(z), target))

    def test_step(self, batch, batch_idx):
        z, target = batch
        self.log("test_loss", nn.functional.mse_loss(self(z), target))

    def on_validation_epoch_end(self):
        grid = self(torch.zeros(4, self.hparams.latent, device=self.device)).detach().cpu()
        self.logger.experiment.add_image("generated_images", torch.cat(list(grid), dim=2), self.current_epoch)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main():
    args = parse_args(__doc__)
    L.seed_everything(3)
    generator = torch.Generator().manual_seed(0)
    z = torch.randn(32, 4, generator=generator)
    target = torch.rand(32, 1, 6, 6, generator=generator)
    loader = DataLoader(TensorDataset(z, target), batch_size=8)

    model = LitDecoder()
    trainer = L.Trainer(max_epochs=2, enable_progress_bar=False, enable_model_summary=False, **trainer_kwargs(args))
    expect(type(trainer.logger).__name__ == "TensorBoardLogger", f"default logger {type(trainer.logger).__name__}")
    trainer.logger._log_graph = True  # as user code turns the graph on for the default logger
    trainer.fit(model, loader, loader)
    for stage in (trainer.validate, trainer.test, trainer.validate, trainer.test):
        stage(model, loader, verbose=False)

    version = Path(trainer.logger.log_dir)
    expect(version == Path(args.root) / "lightning_logs" / "version_0", f"log_dir {version}")
    hparams = yaml.safe_load((version / "hparams.yaml").read_text())
    expect(hparams == {"latent": 4, "side": 6, "lr": 0.05}, f"hparams.yaml read back as {hparams}")
    checkpoint = Path(trainer.checkpoint_callback.best_model_path)
    expect(checkpoint.parent == version / "checkpoints" and checkpoint.is_file(), f"checkpoint at {checkpoint}")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = sorted(version.glob("events.out.tfevents.*"))
    if args.devices == 1 and args.strategy == "auto":  # one process ran every stage: one event file
        expect(len(events) == 1, f"{len(events)} event files for one process: {[e.name for e in events]}")
    images, graphs = [], 0
    for path in events:
        accumulator = EventAccumulator(str(path), size_guidance={"images": 0})
        accumulator.Reload()
        images += accumulator.Images("generated_images") if "generated_images" in accumulator.Tags()["images"] else []
        graphs += bool(accumulator.Tags()["graph"])
    expect(len(images) == 1 + 2 + 2, f"{len(images)} images logged (sanity check, 2 fit epochs, 2 validate calls)")
    expect(images[0].width == 24 and images[0].height == 6, f"image of {images[0].width}x{images[0].height}")
    expect(graphs >= 1, "the model graph was not recorded")
    ok("tensorboard_logging")


if __name__ == "__main__":
    main()
