"""Run by test_fsdp_checkpoints in a small file system of its own (a tmpfs in a private mount namespace):
fsdp on 2 processes saves a sharded checkpoint after every epoch into ``sys.argv[1]`` until the disk is full."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_models import MLP

import accelkit

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=folder, save_top_k=-1)
    trainer = accelkit.Trainer(accelerator="cpu", strategy="fsdp", devices=2, max_epochs=int(sys.argv[2]),
                               logger=False, enable_progress_bar=False, enable_model_summary=False,
                               limit_val_batches=0, default_root_dir=folder, callbacks=[callback])
    trainer.fit(MLP())
