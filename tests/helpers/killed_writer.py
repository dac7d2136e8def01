"""Run by tests/test_checkpoint.py: save a checkpoint, then start a large one that never finishes.

Usage: ``python killed_writer.py PATH``. Prints ``WRITING`` once the second write is in progress.
"""

from __future__ import annotations

import sys

import torch

from accelkit.checkpoint import files as checkpoint
from helpers.models import SlowPickle


def main(path: str) -> None:
    """First write completes; the second blocks inside ``torch.save`` until the test kills this process."""
    checkpoint.atomic_save({"epoch": 1, "weights": torch.arange(1000.0)}, path)
    checkpoint.atomic_save({"epoch": 2, "weights": torch.zeros(4_000_000), "stall": SlowPickle()}, path)


if __name__ == "__main__":
    main(sys.argv[1])
