"""What the Trainer's default checkpoint callback leaves on disk, recorded the same way under accelkit's Trainer and
Lightning's (``helpers.fixtures.lightning_records``): the files of the run's checkpoint folder and the paths the
callback reports, relative to the run's root. A program that counts or globs its checkpoint folder
(``len(os.listdir(...)) == 1``, ``glob("*.ckpt")[0]``) sees what these records hold.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs

#: scenario -> the Trainer's keyword arguments besides the common ones (no checkpoint callback of the user's)
SCENARIOS: dict[str, dict[str, Any]] = {
    "with_a_logger": {"max_epochs": 2, "logger": "csv"},
    "without_a_logger": {"max_epochs": 3, "logger": False},
    "by_steps": {"max_steps": 5, "logger": False},
}


def _relative(path: str, root: str) -> str:
    return os.path.relpath(path, root) if path else ""


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Fit a one-layer Module with the default checkpoint callback; the checkpoint files every folder under ``root``
    holds, and the callback's ``best_model_path`` and ``last_model_path``, relative to ``root``."""
    chosen = pick(framework)
    options = dict(SCENARIOS[scenario])
    if options.get("logger") == "csv":
        options["logger"] = chosen.loggers.CSVLogger(root)
    model = linear_module(chosen.Module, lr=0.1)()
    trainer = chosen.Trainer(accelerator="cpu", devices=1, default_root_dir=root, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0, **options)
    trainer.fit(model, DataLoader(random_pairs(16, torch.Generator().manual_seed(0)), batch_size=4))
    callback = trainer.checkpoint_callback
    files = sorted(os.path.relpath(os.path.join(folder, name), root) for folder, _, names in os.walk(root)
                   for name in names if name.endswith(".ckpt"))
    return {"files": files, "best_model_path": _relative(callback.best_model_path, root),
            "last_model_path": _relative(callback.last_model_path, root), "global_step": trainer.global_step}
