"""Run under ``torchrun`` by test_fsdp.py: strategy="fsdp" over ``num_nodes`` nodes of one process each; it must
join the launcher's processes, not start its own. Each rank writes ``FOLDER/torchrun-rank<r>.pt`` (see Probe) and
rank 0 the trained full weights (gathered after fit) to ``FOLDER/torchrun-weights.pt``.

Usage: ``torchrun --nnodes 2 --nproc-per-node 1 --node-rank R ... torchrun_fsdp.py FOLDER NUM_NODES``
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from fsdp_models import MLP, Probe

import accelkit


def main(folder: str, num_nodes: int) -> int:
    """Fit the MLP for one epoch with fsdp, joining the launcher's processes."""
    trainer = accelkit.Trainer(accelerator="cpu", strategy="fsdp", num_nodes=num_nodes, devices=1, max_epochs=1,
                               logger=False, enable_checkpointing=False, enable_progress_bar=False,
                               enable_model_summary=False, limit_val_batches=0, default_root_dir=folder,
                               callbacks=[Probe(folder, "torchrun")])
    model = MLP()
    trainer.fit(model)
    # Under a launcher the module stays sharded after fit and the process group stays up: gather the weights.
    full = trainer.strategy.full_state_dict(model)
    if trainer.global_rank == 0:
        torch.save(full, Path(folder) / "torchrun-weights.pt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
