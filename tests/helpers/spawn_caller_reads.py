"""What the caller's Trainer reads after runs in worker processes (two on the CPU), recorded the same way on
accelkit's Trainer and on Lightning's (``tests/test_trainer.py`` compares them): the run is the workers', and
rank 0 hands some of its state back to the caller.

The workers are forked (:data:`STRATEGY`): what the caller reads afterwards is what the launcher hands back, and
that is the same code for ``ddp_fork`` and ``ddp_spawn`` in both frameworks (Lightning's
``_MultiProcessingLauncher``, accelkit's ``SpawnLauncher``: only the start method differs); spawned workers would
add two fresh interpreters, each importing torch, to every call (16 in all, most of the comparison's cost).

``"fit_then_validate"``: a fit of 2 training and validation batches per rank (2 epochs), then
``trainer.validate`` of 3 batches per rank; ``"validate_then_fit"``: the same two the other way round. After each
call: ``num_training_batches``, ``num_val_batches``, ``current_epoch``, ``global_step``, the state's ``fn`` and
``status`` and the three metric dicts' names.

The Module classes are made on first use, per framework, and found under their names by a spawned
worker's unpickling (this module's ``__getattr__``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs
from helpers.trainer_counts import plain

SCENARIOS = ("fit_then_validate", "validate_then_fit")
#: the strategy of every run: its workers forked (see the module's docstring)
STRATEGY = "ddp_fork"

_made: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """``Net_<framework>``: the Module class of that framework, made once (a spawned worker unpickles it by name)."""
    kind, _, framework = name.partition("_")
    if kind != "Net" or framework not in ("accelkit", "lightning"):
        raise AttributeError(name)
    if name not in _made:
        class Net(linear_module(pick(framework).Module, lr=0.05)):  # type: ignore[misc]
            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                loss = F.mse_loss(self.layer(batch[0]), batch[1])
                self.log("train_loss", loss, prog_bar=True)
                return loss

            def validation_step(self, batch: Any, batch_idx: int) -> None:
                self.log("val_loss", F.mse_loss(self.layer(batch[0]), batch[1]), prog_bar=True)

        Net.__name__ = Net.__qualname__ = name
        Net.__module__ = __name__
        _made[name] = Net
    return _made[name]


def reads(trainer: Any, where: str) -> list[Any]:
    """What the caller's Trainer reads (see the module's docstring)."""
    return [where, plain(trainer.num_training_batches), plain(trainer.num_val_batches), trainer.current_epoch,
            trainer.global_step, str(getattr(trainer.state.fn, "value", trainer.state.fn)),
            str(getattr(trainer.state.status, "value", trainer.state.status)),
            [sorted(getattr(trainer, kind)) for kind in ("callback_metrics", "logged_metrics", "progress_bar_metrics")]]


def record(framework: str, root: str, scenario: str) -> list[Any]:
    """Run ``scenario`` (:data:`SCENARIOS`) with ``framework`` (``"accelkit"`` or ``"lightning"``) in ``root``."""
    chosen = pick(framework)
    generator = torch.Generator().manual_seed(0)

    def data(batches: int) -> DataLoader:  # each of the two ranks gets ``batches`` batches of 2
        return DataLoader(random_pairs(4 * batches, generator), batch_size=2)

    trainer = chosen.Trainer(accelerator="cpu", devices=2, strategy=STRATEGY, max_epochs=2, logger=False,
                             enable_model_summary=False, enable_progress_bar=False, enable_checkpointing=False,
                             num_sanity_val_steps=0, default_root_dir=root)
    module = __getattr__(f"Net_{framework}")()
    seen = [reads(trainer, "made")]
    if scenario == "validate_then_fit":
        trainer.validate(module, data(3), verbose=False)
        seen.append(reads(trainer, "after validate"))
    trainer.fit(module, data(2), data(2))
    seen.append(reads(trainer, "after fit"))
    if scenario == "fit_then_validate":
        trainer.validate(module, data(3), verbose=False)
        seen.append(reads(trainer, "after validate"))
    return seen
