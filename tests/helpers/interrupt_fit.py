"""A fit that prints each step and sleeps in it, for the signal tests: ``python interrupt_fit.py ROOT DEVICES``.

``COMPILE_STEP=1`` in the environment compiles the training step (``compile_step=True``), and ``GRACE_S`` sets the
in-place launcher's grace after a first signal (``InPlaceLauncher.grace_s``); ``STRATEGY`` is the Trainer's strategy
(``auto`` unless set: ``ddp_spawn`` on several devices)."""

import os
import sys
import time
from pathlib import Path

import torch

import accelkit

TESTS = str(Path(__file__).resolve().parents[1])
if TESTS not in sys.path:  # run as a script: the helpers are the package of the tests folder, never top-level
    sys.path.insert(0, TESTS)  # modules (a top-level ``models`` would shadow a test project's ``models.py``)
from helpers.models import RegressionModule  # noqa: E402


class Slow(accelkit.Callback):
    """Prints ``batch <batch_idx> <pid>`` before every batch and ``step <global_step> <pid>`` after it, then sleeps
    (long when asked, to test a second signal)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        sys.stdout.write(f"batch {batch_idx} {os.getpid()}\n")
        sys.stdout.flush()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        sys.stdout.write(f"step {trainer.global_step} {os.getpid()}\n")  # one write: workers share the pipe
        sys.stdout.flush()
        time.sleep(float(os.environ.get("SLOW_S", "0.05")))


if __name__ == "__main__":
    root, devices = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    if "GRACE_S" in os.environ:
        from accelkit.strategies.launchers.in_place import InPlaceLauncher

        InPlaceLauncher.grace_s = float(os.environ["GRACE_S"])
    trainer = accelkit.Trainer(accelerator="cpu", devices=devices, strategy=os.environ.get("STRATEGY", "auto"),
                               max_epochs=1000, logger=False,
                               enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
                               callbacks=[Slow()], compile_step=os.environ.get("COMPILE_STEP") == "1")
    trainer.fit(RegressionModule())
