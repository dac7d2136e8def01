"""What ``trainer.validate``/``trainer.test``/``trainer.predict`` return after a fit, with one and two loaders, and
the three metric dicts after each, recorded the same way on accelkit's Trainer and on Lightning's
(``tests/test_logging_api.py`` compares them).

The Module logs per-epoch values, values logged per step and per epoch, and (``on_validation_epoch_end``/
``on_test_epoch_end``) a value at the epoch's end: with two loaders, the latter is every loader's, without a
``/dataloader_idx_N`` suffix, as in Lightning; and in ``on_validation_epoch_start``, ``on_test_start`` and
``on_test_epoch_start`` (before the loaders run: every loader's too), as a Callback does in ``on_test_start`` and
``on_test_epoch_end`` (what those values give in the returned results and the dicts).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers.frameworks import linear_module, pick

SCENARIOS = ("after_fit",)


def record(framework: str, root: str, scenario: str) -> dict[str, Any]:
    """Fit one epoch, then validate and test with one and two loaders and predict with one and two, with
    ``framework`` (``"accelkit"`` or ``"lightning"``); returns what each call returned (values rounded) and the metric
    dicts' names after it."""
    os.makedirs(root, exist_ok=True)
    chosen = pick(framework)

    class Net(linear_module(chosen.Module, lr=0.1)):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("val_loss", loss)
            self.log("val_both", loss, on_step=True, on_epoch=True, prog_bar=True)
            self.log("val_step_only", loss, on_step=True, on_epoch=False)

        def on_validation_epoch_end(self) -> None:
            self.log("val_end", 2.5, prog_bar=True)

        def on_validation_epoch_start(self) -> None:
            self.log("val_epoch_start", 0.75)

        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("test_loss", loss)
            self.log("test_both", loss, on_step=True, on_epoch=True)

        def on_test_epoch_end(self) -> None:
            self.log("test_end", 1.5)

        def on_test_start(self) -> None:
            self.log("test_start", 0.5)

        def on_test_epoch_start(self) -> None:
            self.log("test_epoch_start", 0.25, prog_bar=True)

        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
            return self.layer(batch[0])

    class LogsFromTestHooks(chosen.Callback):  # type: ignore[misc, name-defined]
        def on_test_start(self, trainer: Any, module: Any) -> None:
            module.log("callback_test_start", 4.0)

        def on_test_epoch_end(self, trainer: Any, module: Any) -> None:
            module.log("callback_test_end", 6.0)

    trainer = chosen.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False, default_root_dir=root,
                             callbacks=[LogsFromTestHooks()])
    generator = torch.Generator().manual_seed(0)

    def data(n: int = 8) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(n, 4, generator=generator)), batch_size=2)

    def rounded(results: list[dict[str, Any]]) -> list[dict[str, float]]:
        return [{k: round(float(v), 5) for k, v in sorted(r.items())} for r in results]

    def names() -> list[list[str]]:
        return [sorted(getattr(trainer, kind)) for kind in ("callback_metrics", "logged_metrics",
                                                              "progress_bar_metrics")]

    module = Net()
    trainer.fit(module, data(), [data(), data(6)])
    seen: dict[str, Any] = {"fit": names()}
    seen["validate one"] = [rounded(trainer.validate(module, data(), verbose=False)), names()]
    seen["validate two"] = [rounded(trainer.validate(module, [data(), data(6)], verbose=False)), names()]
    seen["test one"] = [rounded(trainer.test(module, data(), verbose=False)), names()]
    seen["test two"] = [rounded(trainer.test(module, [data(), data(4)], verbose=False)), names()]
    one = trainer.predict(module, data())
    two = trainer.predict(module, [data(), data(4)])
    seen["predict"] = [[type(one).__name__, len(one), list(one[0].shape)],
                       [type(two).__name__, len(two), type(two[0]).__name__, len(two[1]), list(two[1][0].shape)],
                       names()]
    return seen
