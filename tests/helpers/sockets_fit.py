"""Run by the no-open-doors tests in a subprocess: a 2-process fit of a spawning strategy on this machine whose
every worker, once its process group is up, records the TCP sockets it and the launching process listen on.

Writes ``FOLDER/sockets-<rank>.json``: ``{"worker": [[address, port], ...], "launcher": [...]}``.
Usage: ``python sockets_fit.py FOLDER STRATEGY``
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import accelkit
from helpers.models import RegressionModule
from helpers.sockets import listening_addresses


class RecordSockets(accelkit.Callback):
    """At the first training batch (every socket of the run is open by then), write what this worker and its
    launching process listen on."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == 0 and trainer.current_epoch == 0:
            record = {"worker": listening_addresses(os.getpid()), "launcher": listening_addresses(os.getppid())}
            path = Path(self.folder) / f"sockets-{trainer.global_rank}.json"
            path.write_text(json.dumps(record))
            trainer.strategy.barrier("sockets recorded")  # no rank closes anything before every rank has looked


def main(folder: str, strategy: str) -> int:
    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_epochs=1, logger=False,
                               enable_checkpointing=False, enable_progress_bar=False, default_root_dir=folder,
                               callbacks=[RecordSockets(folder)])
    trainer.fit(RegressionModule(batch_size=4))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
