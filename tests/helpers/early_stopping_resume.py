"""EarlyStopping's state across the two Trainers' checkpoints, recorded the same way on accelkit's Trainer and on
Lightning's (``tests/test_callbacks_builtin.py`` compares them).

``"save"`` fits with an ``EarlyStopping(monitor="val_loss", patience=2)`` and a ``ModelCheckpoint`` keeping every
epoch's checkpoint, the validation loss a fixed sequence by epoch (:data:`VAL_LOSSES`: it stops at epoch 3 with its
patience exhausted). ``"resume_<epoch>_from_<framework>"`` resumes a fresh fit from the checkpoint of that epoch
written by ``<framework>``'s ``"save"`` (in ``<root's parent>/save`` for Lightning's, ``save_accelkit`` for
accelkit's): from epoch 1 (not stopped yet) and from epoch 3 (stopped); Lightning resumes from accelkit's callback
states in its own checkpoint (:func:`transplant`). Each records the callback's state as the run
starts (after the checkpoint's restore) and as it ends: the stopping reason (its ``str``, name and number), its
message, ``wait_count``, ``stopped_epoch``, ``best_score``, ``trainer.early_stopping_callback``'s reason, the epochs
run and the checkpoint files written.
"""

from __future__ import annotations

import glob
import os
from typing import Any

import torch
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs

#: the validation loss of each epoch: best at 1, stopped at 3 (patience 2); resumed after 3, best at 4, stopped at 6
VAL_LOSSES = (1.0, 0.5, 0.6, 0.7, 0.4, 0.45, 0.46, 0.47, 0.48, 0.49)

#: the scenarios, by name: ``None`` (a fresh fit that saves) or (the epoch of the checkpoint, whose ``"save"``)
SCENARIOS: dict[str, tuple[int, str] | None] = {
    "save": None,
    "resume_1_from_lightning": (1, "save"),
    "resume_3_from_lightning": (3, "save"),
    "resume_1_from_accelkit": (1, "save_accelkit"),
    "resume_3_from_accelkit": (3, "save_accelkit"),
}


def state(stopper: Any, trainer: Any) -> list[Any]:
    """What an ``EarlyStopping`` holds, as JSON."""
    reason = stopper.stopping_reason
    return [str(reason), reason.name, reason.value, stopper.stopping_reason_message, stopper.wait_count,
            stopper.stopped_epoch, float(stopper.best_score), str(trainer.early_stopping_callback.stopping_reason)]


def transplant(accelkit_path: str, root: str, epoch: int) -> str:
    """A copy of Lightning's checkpoint of ``epoch`` holding the callbacks' states of accelkit's (``accelkit_path``):
    Lightning's Trainer reads its own ``loops`` entry only, so what is compared is accelkit's callback state
    resuming in Lightning."""
    [own] = glob.glob(os.path.join(os.path.dirname(root), "save", "checkpoints", f"epoch={epoch}-*.ckpt"))
    checkpoint = torch.load(own, weights_only=False)
    checkpoint["callbacks"] = torch.load(accelkit_path, weights_only=False)["callbacks"]
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "transplanted.ckpt")
    torch.save(checkpoint, path)
    return path


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Run ``scenario`` (:data:`SCENARIOS`) with ``framework`` (``"accelkit"`` or ``"lightning"``) in ``root``."""
    chosen = pick(framework)
    seen: dict[str, Any] = {"epochs": []}

    class Net(linear_module(chosen.Module, lr=0.05)):  # type: ignore[misc]
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", VAL_LOSSES[self.current_epoch])

    class Reader(chosen.Callback):  # type: ignore[misc, name-defined]
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            seen["start"] = state(stopper, trainer)

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            seen["epochs"].append(trainer.current_epoch)

    stopper = chosen.callbacks.EarlyStopping(monitor="val_loss", patience=2)
    checkpoints = chosen.callbacks.ModelCheckpoint(dirpath=os.path.join(root, "checkpoints"), save_top_k=-1)
    generator = torch.Generator().manual_seed(0)
    data = random_pairs(8, generator)
    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=len(VAL_LOSSES), logger=False,
                             callbacks=[Reader(), stopper, checkpoints], num_sanity_val_steps=0,
                             enable_model_summary=False, enable_progress_bar=False, default_root_dir=root)
    source = SCENARIOS[scenario]
    ckpt_path = None
    if source is not None:
        epoch, folder = source
        [ckpt_path] = glob.glob(os.path.join(os.path.dirname(root), folder, "checkpoints", f"epoch={epoch}-*.ckpt"))
        if framework == "lightning" and folder == "save_accelkit":  # accelkit's loops entry is not Lightning's
            ckpt_path = transplant(ckpt_path, root, epoch)
    trainer.fit(Net(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=4), ckpt_path=ckpt_path)
    seen["end"] = state(stopper, trainer)
    seen["files"] = sorted(os.listdir(os.path.join(root, "checkpoints")))
    return seen
