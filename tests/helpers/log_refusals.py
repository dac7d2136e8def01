"""Where ``self.log`` is refused, and what a value it cannot record raises, run under accelkit's Trainer or
Lightning's (``record(framework, root, scenario)``, read by ``tests/test_logging_api.py`` beside
``fixtures.lightning_records``): a scenario is a Module hook that logs (``"value:<kind>"``: ``training_step``
logging a value of that kind). Imports neither framework until :func:`record` runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from helpers.frameworks import linear_module, pick, random_pairs

#: hooks whose ``self.log`` Lightning refuses, run by ``fit`` (the others: by ``test`` or ``predict``)
FIT_HOOKS = ("configure_optimizers", "configure_callbacks", "configure_model", "prepare_data", "setup", "teardown",
             "train_dataloader", "val_dataloader", "on_fit_start", "on_fit_end", "on_train_end", "on_validation_end",
             "on_validation_model_eval", "on_validation_model_train", "on_validation_model_zero_grad",
             "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer", "lr_scheduler_step",
             "on_save_checkpoint")
TEST_HOOKS = ("test_dataloader", "on_test_end", "on_test_model_eval", "on_test_model_train")
PREDICT_HOOKS = ("predict_step", "predict_dataloader", "on_predict_start", "on_predict_end", "on_predict_epoch_start",
                 "on_predict_epoch_end", "on_predict_batch_start", "on_predict_batch_end")
#: what ``training_step`` logs in a ``value:<kind>`` scenario (a ``bool`` is logged, the others refused)
VALUES: dict[str, Any] = {"str": "text", "dict": {"a": 1.0}, "list": [1.0], "none": None, "bool": True}
#: hooks that run once per loop or epoch, run by ``fit``: they log epoch values only (an ``on_step:<hook>`` scenario
#: logs with ``on_step=True``, an ``on_epoch:<hook>`` one with ``on_epoch=False``)
EPOCH_LEVEL = ("on_train_start", "on_train_epoch_start", "on_train_epoch_end", "on_validation_start",
               "on_validation_epoch_start", "on_validation_epoch_end")
#: hooks where logging is allowed, for contrast (the value is kept)
ALLOWED = ("training_step", "on_train_batch_start", *EPOCH_LEVEL)
SCENARIOS = (*FIT_HOOKS, *TEST_HOOKS, *PREDICT_HOOKS, *ALLOWED, *(f"value:{kind}" for kind in VALUES),
             *(f"{option}:{hook}" for option in ("on_step", "on_epoch") for hook in EPOCH_LEVEL),
             *(f"renamed:{hook}" for hook in PREDICT_HOOKS))
#: the options of an ``<option>:<hook>`` scenario's log (a ``renamed:<hook>`` scenario's hook is a function of
#: another name, ``shared_hook``, assigned to the hook's: Lightning refuses by the hook running, not by the name)
OPTIONS = {"on_step": "on_step=True", "on_epoch": "on_epoch=False", "renamed": ""}


def module_class(framework: str, scenario: str) -> type:
    """A Module on ``framework`` that logs ``x`` in the scenario's hook (or logs its value in ``training_step``)."""
    base = linear_module(pick(framework).Module, 0.1)

    def loader(seed: int) -> DataLoader:
        return DataLoader(random_pairs(8, torch.Generator().manual_seed(seed)), batch_size=4)

    class Net(base):  # type: ignore[misc, valid-type]
        def train_dataloader(self) -> Any:
            return loader(0)

        def val_dataloader(self) -> Any:
            return loader(1)

        def test_dataloader(self) -> Any:
            return loader(2)

        def predict_dataloader(self) -> Any:
            return loader(3)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            return None

        def test_step(self, batch: Any, batch_idx: int) -> None:
            return None

        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return self.layer(batch[0])

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1)}

    if scenario.startswith("value:"):
        value = VALUES[scenario.split(":")[1]]

        def training_step(self: Any, batch: Any, batch_idx: int) -> Any:
            self.log("x", value)
            return super(Logs, self).training_step(batch, batch_idx)

        hook, method = "training_step", training_step
    else:
        option, _, hook = scenario.rpartition(":")
        # the hook's own name on its code: accelkit names the hook that logs from its frame
        function = "shared_hook" if option == "renamed" else hook
        source = (f"def {function}(self, *args, **kwargs):\n    result = super(Logs, self).{hook}(*args, **kwargs)\n"
                  f"    self.log('x', 1.0{', ' + OPTIONS[option] if OPTIONS.get(option) else ''})\n    return result\n")
        names: dict[str, Any] = {}
        exec(source, names)  # noqa: S102 - a method named for the hook, from this module's own text
        method = names[function]
    Logs = type("Logs", (Net,), {hook: method})
    method.__globals__["Logs"] = Logs
    return Logs


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Run the scenario: whether it raised (a ``ValueError`` or not), or whether ``x`` was kept (and as what: its
    value and dtype in ``callback_metrics``, and whether ``logged_metrics`` has it)."""
    Path(root).mkdir(parents=True, exist_ok=True)
    trainer = pick(framework).Trainer(default_root_dir=root, max_epochs=1, accelerator="cpu",
                                      devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                                      num_sanity_val_steps=0, enable_checkpointing=scenario == "on_save_checkpoint")
    module = module_class(framework, scenario)()
    try:
        if scenario in TEST_HOOKS:
            trainer.test(module, verbose=False)
        elif scenario.rpartition(":")[2] in PREDICT_HOOKS:
            trainer.predict(module)
        else:
            trainer.fit(module)
    except Exception as error:  # noqa: BLE001 - what is raised is the record
        return {"raised": True, "value_error": isinstance(error, ValueError), "kept": False}
    kept = trainer.callback_metrics.get("x")
    return {"raised": False, "value_error": False, "kept": kept is not None and [float(kept), str(kept.dtype)],
            "logged": "x" in trainer.logged_metrics}
