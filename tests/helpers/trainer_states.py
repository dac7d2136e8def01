"""What ``setup(stage)``/``teardown(stage)`` (the module's, a callback's and the profiler's) receive and what
``trainer.state`` (``fn``, ``stage``, ``status``) and the Trainer's stage flags read in each hook of ``fit``,
``validate``, ``test`` and ``predict``, recorded the same way on accelkit's Trainer and on Lightning's
(``tests/test_trainer.py`` compares them).

``"all_stages"`` runs the four on one Trainer (a sanity check in the fit); ``"raises"`` a fit whose
``training_step`` raises (the state after it); ``"ddp_fork_caller"`` a fit in two forked processes (the caller's
state before and after it: the hooks run in the workers). Each value is described by :func:`describe`: its type's name,
``repr``, ``str``, ``format`` with no and with a width, how it compares with its value in capitals and with itself
in a set of strings, its hash against its lower-case value's, and its ``value`` and ``name``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import linear_module, pick, reading_callback

SCENARIOS = ("all_stages", "raises", "ddp_fork_caller")

#: the Callback hooks that read the state
HOOKS = ("on_fit_start", "on_sanity_check_start", "on_train_start", "on_train_epoch_start", "on_train_batch_start",
         "on_validation_start", "on_validation_batch_start", "on_validation_end", "on_train_epoch_end",
         "on_train_end", "on_fit_end", "on_test_start", "on_test_batch_start", "on_test_end", "on_predict_start",
         "on_predict_batch_start", "on_predict_end", "on_exception")


def describe(value: Any) -> Any:
    """A stage or status as JSON (see the module's docstring); ``None`` as ``None``."""
    if value is None:
        return None
    plain = str(getattr(value, "value", value))
    return [type(value).__name__, repr(value), str(value), f"{value}", f"{value:>4}", value == plain.upper(),
            value in {plain}, plain in {value: 1}, hash(value) == hash(plain.lower()), getattr(value, "value", None),
            getattr(value, "name", None)]


def state(trainer: Any) -> list[Any]:
    """``trainer.state``'s three fields and the Trainer's stage flags."""
    found = trainer.state
    return [describe(found.fn), describe(found.stage), describe(getattr(found, "status", None)),
            [trainer.training, trainer.validating, trainer.testing, trainer.predicting, trainer.sanity_checking,
             trainer.evaluating]]


def record(framework: str, root: str, scenario: str) -> list[Any]:
    """Run ``scenario`` with ``framework`` (``"accelkit"`` or ``"lightning"``); returns ``[where, ...]`` rows."""
    chosen = pick(framework)
    seen: list[Any] = []

    class StageProfiler(chosen.profilers.Profiler):  # type: ignore[misc, name-defined]
        """Records the stage the Trainer gives the profiler's ``setup`` and (through ``describe``) ``teardown``."""

        def start(self, action_name: str) -> None:
            pass

        def stop(self, action_name: str) -> None:
            pass

        def summary(self) -> str:
            return ""

        def setup(self, stage: Any, local_rank: Any = None, log_dir: Any = None) -> None:
            super().setup(stage, local_rank, log_dir)
            seen.append(["profiler setup", describe(stage), None])

        def teardown(self, stage: Any) -> None:
            super().teardown(stage)
            seen.append(["profiler teardown", describe(stage), None])

    class Net(linear_module(chosen.Module, lr=0.05)):  # type: ignore[misc]
        def setup(self, stage: Any) -> None:
            seen.append(["module setup", describe(stage), state(self.trainer)])

        def teardown(self, stage: Any) -> None:
            seen.append(["module teardown", describe(stage), state(self.trainer)])

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if scenario == "raises":
                raise RuntimeError("stop here")
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            pass

        def test_step(self, batch: Any, batch_idx: int) -> None:
            pass

        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
            return self.layer(batch[0])

    def read(hook: str, trainer: Any, *args: Any) -> None:
        seen.append([hook, None, state(trainer)])

    class Reader(reading_callback(chosen.Callback, HOOKS, read)):  # type: ignore[misc]
        def setup(self, trainer: Any, pl_module: Any, stage: Any) -> None:
            seen.append(["callback setup", describe(stage), state(trainer)])

        def teardown(self, trainer: Any, pl_module: Any, stage: Any) -> None:
            seen.append(["callback teardown", describe(stage), state(trainer)])

    for cls in (Net, Reader):  # by name, for the forked workers (they have the classes: forked from here)
        cls.__qualname__ = cls.__name__ = f"{cls.__name__}_{framework}"
        globals()[cls.__name__] = cls
    data = DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2)
    spread = ({"devices": 2, "strategy": "ddp_fork"} if scenario == "ddp_fork_caller"
              else {"devices": 1, "profiler": StageProfiler()})
    trainer = chosen.Trainer(accelerator="cpu", max_epochs=1, logger=False, callbacks=[Reader()],
                             num_sanity_val_steps=1, enable_model_summary=False, enable_progress_bar=False,
                             enable_checkpointing=False, default_root_dir=root, **spread)
    seen.append(["made", None, state(trainer)])
    module = Net()
    if scenario == "raises":
        try:
            trainer.fit(module, data, data)
        except RuntimeError:
            seen.append(["after the exception", None, state(trainer)])
        return seen
    trainer.fit(module, data, data)
    if scenario == "ddp_fork_caller":
        return [row for row in seen if row[0] in ("made", "after fit")] + [["after fit", None, state(trainer)]]
    seen.append(["after fit", None, state(trainer)])
    for run in (trainer.validate, trainer.test, trainer.predict):
        run(module, data, verbose=False) if run != trainer.predict else run(module, data)
        seen.append([f"after {run.__name__}", None, state(trainer)])
    return seen
