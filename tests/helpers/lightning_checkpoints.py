"""Writes the Lightning-made checkpoint fixtures of ``tests/test_exact_resume.py`` (run it with Lightning installed;
the files it writes are committed, so the tests need no Lightning):

- ``tests/data/lightning_epoch_end.ckpt``: written by ``ModelCheckpoint()`` at the end of epoch 0 (step 8);
  Lightning resumes from it at epoch 1, batch 0;
- ``tests/data/lightning_mid_epoch.ckpt``: ``last.ckpt`` of ``ModelCheckpoint(every_n_train_steps=15)``, written
  after batch 7 of epoch 1 (step 15); Lightning resumes from it at epoch 1, batch 7.

Both come from :func:`dataset` (32 samples, 4 per batch: 8 batches per epoch) and a ``Linear(4, 1)`` named
``layer`` trained with SGD (the shapes of ``LinearNet`` in ``tests/test_exact_resume.py``).

``python tests/helpers/lightning_checkpoints.py`` (from the repository root).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

DATA = Path(__file__).resolve().parent.parent / "data"
EPOCH_END = DATA / "lightning_epoch_end.ckpt"
MID_EPOCH = DATA / "lightning_mid_epoch.ckpt"


def dataset() -> TensorDataset:
    """32 samples of 4 features (the fixtures' and the tests' data)."""
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(32, 4, generator=generator))


def main() -> None:
    import lightning as L

    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    L.seed_everything(0)
    with tempfile.TemporaryDirectory() as folder:
        epochs = L.pytorch.callbacks.ModelCheckpoint(dirpath=Path(folder) / "epochs", save_top_k=-1)
        steps = L.pytorch.callbacks.ModelCheckpoint(dirpath=Path(folder) / "steps", every_n_train_steps=15,
                                                    save_last=True, save_top_k=0)
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=folder, callbacks=[epochs, steps])
        trainer.fit(Net(), DataLoader(dataset(), batch_size=4))
        shutil.copyfile(Path(folder) / "epochs" / "epoch=0-step=8.ckpt", EPOCH_END)
        shutil.copyfile(Path(folder) / "steps" / "last.ckpt", MID_EPOCH)
    for path in (EPOCH_END, MID_EPOCH):
        print(path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
