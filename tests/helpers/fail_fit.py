"""Run by tests/test_ddp.py in a subprocess: a 2-process ddp_spawn fit whose rank 1 raises.

Prints ``CAUGHT <type>`` and the error's message, so the test can check what reached the caller.
Usage: ``python fail_fit.py FOLDER``
"""

from __future__ import annotations

import sys

import accelkit
from helpers.models import FailingModule


def main(folder: str) -> int:
    """Fit, catch what comes back, report it on stdout."""
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, default_root_dir=folder)
    try:
        trainer.fit(FailingModule(folder))
    except Exception as exc:  # report whatever came back, so the test sees a wrong type too
        print(f"CAUGHT {type(exc).__module__}.{type(exc).__name__}")
        print(str(exc))
        return 0
    print("NO ERROR")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
