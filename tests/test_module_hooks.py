"""Overridable steps and hooks of a Module (issue 8, item 1), as Lightning documents them: an overridden
``optimizer_step``, ``optimizer_zero_grad``, ``backward``, ``configure_gradient_clipping``, ``lr_scheduler_step``
and the batch-transfer hooks are the ones used; ``on_train_batch_start`` returning ``-1`` ends the epoch; a
misspelt hook warns once; ``configure_callbacks`` replaces Trainer callbacks of the same type.

Each test observes the effect on a real CPU fit (the learning rate the optimizer used, the update it made, the
batch the step saw), so it fails where the override would be ignored, as it was before issue 8.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from helpers.guards import child_env  # noqa: E402
from helpers.models import RegressionModule, quiet_trainer, regression_data  # noqa: E402

QUIET = dict(enable_model_summary=False, num_sanity_val_steps=0)


def loader(n: int = 16, batch_size: int = 4, seed: int = 0) -> DataLoader:
    return DataLoader(regression_data(n, seed=seed), batch_size=batch_size)


class Base(accelkit.Module):
    """A linear regression on plain SGD that records what the optimizer used at each step."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.lr = lr
        self.steps: list[dict[str, Any]] = []
        self.losses: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.losses.append(loss.detach().clone())
        return loss

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.steps.append({"lr": optimizer.param_groups[0]["lr"], "grad": self.layer.weight.grad.detach().clone(),
                           "before": self.layer.weight.detach().clone()})

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.steps and "after" not in self.steps[-1]:
            self.steps[-1]["after"] = self.layer.weight.detach().clone()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


# ---------------------------------------------------------------------------------------------- optimizer_step
class WarmUp(Base):
    """Lightning's documented learning-rate warm-up, written in an ``optimizer_step`` override."""

    WARMUP = 4

    def __init__(self) -> None:
        super().__init__()
        self.hook_calls: list[tuple[int, int]] = []

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.hook_calls.append((epoch, batch_idx))
        scale = min(1.0, (self.trainer.global_step + 1) / self.WARMUP)
        for group in optimizer.param_groups:
            group["lr"] = scale * self.lr
        optimizer.step(closure=optimizer_closure)


def test_optimizer_step_override_warms_up_the_learning_rate(tmp_path):
    model = WarmUp()
    trainer = quiet_trainer(tmp_path, max_epochs=2, **QUIET)
    trainer.fit(model, loader())
    assert model.hook_calls == [(e, b) for e in range(2) for b in range(4)]
    assert [s["lr"] for s in model.steps] == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1, 0.1, 0.1])
    # The update really used that learning rate (plain SGD: w' = w - lr * grad).
    for step in model.steps:
        torch.testing.assert_close(step["after"], step["before"] - step["lr"] * step["grad"], rtol=0, atol=1e-6)
    assert trainer.global_step == 8


def test_optimizer_step_override_can_skip_steps(tmp_path):
    """An override that does not step on odd batches (Lightning's "update every 2 steps" example): the closure
    still runs training_step for every batch, and only stepped batches count as global steps."""

    class EveryOther(Base):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            if batch_idx % 2 == 0:
                optimizer.step(closure=optimizer_closure)
            else:
                optimizer_closure()

    model = EveryOther()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert len(model.losses) == 4  # training_step ran for every batch
    assert len(model.steps) == 2  # the optimizer stepped twice
    assert trainer.global_step == 2


# ---------------------------------------------------------------------------------------------- zero_grad, backward
def test_optimizer_zero_grad_override_is_used(tmp_path):
    """An override that never zeroes lets gradients accumulate: the gradient at step k is the sum of the k
    first batches' gradients (with the default it would be one batch's gradient)."""

    class NoZero(Base):
        def __init__(self) -> None:
            super().__init__(lr=0.0)  # weights stay put, so each batch's own gradient is the same each time
            self.zero_calls: list[tuple[int, int]] = []

        def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
            self.zero_calls.append((epoch, batch_idx))

    model = NoZero()
    single = []
    for x, y in loader():
        model.zero_grad()
        F.mse_loss(model(x), y).backward()
        single.append(model.layer.weight.grad.clone())
    model.zero_grad(set_to_none=True)
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert model.zero_calls == [(0, 0), (0, 1), (0, 2), (0, 3)]
    for k, step in enumerate(model.steps):
        torch.testing.assert_close(step["grad"], sum(single[: k + 1]), rtol=1e-5, atol=1e-5)


def test_backward_override_is_used_and_gets_the_loss(tmp_path):
    class Custom(Base):
        def __init__(self) -> None:
            super().__init__()
            self.backward_losses: list[torch.Tensor] = []

        def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
            self.backward_losses.append(loss.detach().clone())
            (loss * 3.0).backward()  # a visible change: three times the gradient

    model = Custom()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert len(model.backward_losses) == 4
    for returned, given in zip(model.losses, model.backward_losses, strict=True):
        torch.testing.assert_close(given, returned)
    # the gradient the optimizer used is three times one backward of the batch's loss
    first_x, first_y = next(iter(loader()))
    fresh = Base()
    F.mse_loss(fresh(first_x), first_y).backward()
    torch.testing.assert_close(model.steps[0]["grad"], 3.0 * fresh.layer.weight.grad, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------- clipping
class CustomClip(Base):
    """Clips by value to a tiny bound, whatever the Trainer says, and records the arguments it got."""

    def __init__(self) -> None:
        super().__init__()
        self.clip_calls: list[tuple[Any, Any]] = []

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        self.clip_calls.append((gradient_clip_val, gradient_clip_algorithm))
        self.clip_gradients(optimizer, gradient_clip_val=1e-3, gradient_clip_algorithm="value")


def test_configure_gradient_clipping_override_is_used(tmp_path):
    model = CustomClip()
    trainer = quiet_trainer(tmp_path, max_epochs=1, gradient_clip_val=0.5, **QUIET)
    trainer.fit(model, loader())
    assert len(model.clip_calls) == 4
    assert all(val == 0.5 for val, _ in model.clip_calls)
    # the override's clipping is what the step used: every weight moved by at most lr * 1e-3
    for step in model.steps:
        assert step["grad"].abs().max() > 1e-2  # before clipping (on_before_optimizer_step runs before it)
        assert (step["after"] - step["before"]).abs().max() <= model.lr * 1e-3 * (1 + 1e-4)


def test_configure_gradient_clipping_called_every_step_with_trainer_defaults(tmp_path):
    """Lightning calls the hook at every step, passing the Trainer's ``gradient_clip_val`` and
    ``gradient_clip_algorithm`` (both ``None`` when unset)."""
    model = CustomClip()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    assert model.clip_calls == [(None, None)] * 4
    model = CustomClip()
    trainer = quiet_trainer(tmp_path, max_epochs=1, gradient_clip_val=0.5, gradient_clip_algorithm="value", **QUIET)
    trainer.fit(model, loader())
    assert model.clip_calls == [(0.5, "value")] * 4


def test_gradient_clip_val_clips_the_norm(tmp_path):
    """The default hook applies ``gradient_clip_val`` (norm): each update is lr x a gradient of norm <= 0.05."""
    model = Base()
    trainer = quiet_trainer(tmp_path, max_epochs=1, gradient_clip_val=0.05, **QUIET)
    trainer.fit(model, loader())
    for step in model.steps:
        update = (step["before"] - step["after"]) / model.lr
        assert float(update.norm()) <= 0.05 * (1 + 1e-4)


# ---------------------------------------------------------------------------------------------- schedulers
def test_lr_scheduler_step_override_is_used(tmp_path):
    class Sched(Base):
        def __init__(self) -> None:
            super().__init__()
            self.sched_calls: list[tuple[Any, Any]] = []

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=self.lr)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                       "interval": "step", "frequency": 2}}

        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            self.sched_calls.append((type(scheduler).__name__, metric))
            scheduler.step()
            scheduler.step()  # the override halves twice: visible in the learning rates used

    model = Sched()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader())
    # every 2 steps (frequency 2, interval "step"): after steps 2 and 4
    assert model.sched_calls == [("StepLR", None), ("StepLR", None)]
    assert [s["lr"] for s in model.steps] == pytest.approx([0.1, 0.1, 0.025, 0.025])


def test_lr_scheduler_step_override_gets_the_monitored_metric(tmp_path):
    class Plateau(Base):
        def __init__(self) -> None:
            super().__init__()
            self.metrics: list[Any] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("score", float(self.current_epoch + 1), on_step=False, on_epoch=True)
            return loss

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=self.lr)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "score"}}

        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            self.metrics.append(float(metric))
            scheduler.step(metric)

    model = Plateau()
    quiet_trainer(tmp_path, max_epochs=2, **QUIET).fit(model, loader())
    assert model.metrics == [1.0, 2.0]


# ---------------------------------------------------------------------------------------------- batch transfer
class Transfers(Base):
    """The three batch-transfer hooks each change the batch visibly; the steps record what they get."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_calls: list[tuple[str, int]] = []
        self.seen: list[dict[str, Any]] = []

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.hook_calls.append(("before", dataloader_idx))
        x, y = batch
        return {"x": x, "y": y, "trail": ["before"]}

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        self.hook_calls.append(("transfer", dataloader_idx))
        assert isinstance(device, torch.device) and device.type == "cpu"
        return {"x": batch["x"].to(device) * 0.0, "y": batch["y"].to(device), "trail": batch["trail"] + ["transfer"]}

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        self.hook_calls.append(("after", dataloader_idx))
        return {**batch, "x": batch["x"] + 1.0, "trail": batch["trail"] + ["after"]}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append({"stage": "train", "trail": batch["trail"], "x": batch["x"].clone()})
        return F.mse_loss(self(batch["x"]), batch["y"])

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append({"stage": "val", "trail": batch["trail"], "x": batch["x"].clone()})


def test_batch_transfer_hooks_change_the_batch_the_step_sees(tmp_path):
    model = Transfers()
    trainer = quiet_trainer(tmp_path, max_epochs=1, **QUIET)
    trainer.fit(model, loader(8), loader(4, seed=1))
    assert [s["stage"] for s in model.seen] == ["train", "train", "val"]
    for seen in model.seen:
        assert seen["trail"] == ["before", "transfer", "after"]
        assert torch.equal(seen["x"], torch.ones_like(seen["x"]))  # zeroed in transfer, +1 after it
    assert model.hook_calls == [("before", 0), ("transfer", 0), ("after", 0)] * 3


def test_batch_transfer_hooks_get_the_dataloader_idx(tmp_path):
    model = Transfers()
    trainer = quiet_trainer(tmp_path, max_epochs=1, limit_train_batches=1, **QUIET)
    trainer.fit(model, loader(4), [loader(4, seed=1), loader(4, seed=2)])
    idx = [i for name, i in model.hook_calls if name == "transfer"]
    assert idx == [0, 0, 1]  # the training batch, then one batch of each validation loader


# ---------------------------------------------------------------------------------------------- ending an epoch
def test_on_train_batch_start_returning_minus_one_ends_the_epoch(tmp_path):
    class Stopper(Base):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[tuple[int, int]] = []
            self.epoch_ends = 0

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
            return -1 if batch_idx == 2 else None

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.batches.append((self.current_epoch, batch_idx))
            return super().training_step(batch, batch_idx)

        def on_train_epoch_end(self) -> None:
            self.epoch_ends += 1

    model = Stopper()
    trainer = quiet_trainer(tmp_path, max_epochs=2, **QUIET)
    trainer.fit(model, loader(32))  # 8 batches per epoch
    # batches 0 and 1 of each epoch; the rest of the epoch is skipped, the next epoch runs
    assert model.batches == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert trainer.global_step == 4
    assert model.epoch_ends == 2 and trainer.current_epoch == 2


# ---------------------------------------------------------------------------------------------- misspelt hooks
class Misspelt(Base):
    def on_validation_epoch_ends(self) -> None:  # a typo of on_validation_epoch_end
        pass


class MisspeltCallback(accelkit.Callback):
    def on_train_epoch_ed(self, trainer: Any, pl_module: Any) -> None:  # a typo of on_train_epoch_end
        pass


def test_misspelt_hooks_warn_once_naming_the_closest_hook(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[MisspeltCallback()], **QUIET)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Misspelt(), loader(), loader(4, seed=1))
    texts = [str(w.message) for w in caught]
    module_warnings = [t for t in texts if "on_validation_epoch_ends" in t]
    callback_warnings = [t for t in texts if "on_train_epoch_ed" in t]
    assert len(module_warnings) == 1, texts
    assert len(callback_warnings) == 1, texts
    assert "'on_validation_epoch_end'" in module_warnings[0]
    assert "'on_train_epoch_end'" in callback_warnings[0]
    # each warning points at the misspelt method in this file, not at accelkit's hook table
    places = {(w.filename, w.lineno) for w in caught if "looks like a" in str(w.message)}
    assert places == {(__file__, Misspelt.on_validation_epoch_ends.__code__.co_firstlineno),
                      (__file__, MisspeltCallback.on_train_epoch_ed.__code__.co_firstlineno)}, places


def test_correct_hooks_do_not_warn(tmp_path):
    class Fine(Base):
        def on_validation_epoch_end(self) -> None:
            pass

        def on_train_epoch_end(self) -> None:
            pass

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_trainer(tmp_path, max_epochs=1, **QUIET).fit(Fine(), loader())
    assert not [w for w in caught if "looks like" in str(w.message)], [str(w.message) for w in caught]


# ---------------------------------------------------------------------------------------------- configure_callbacks
class Counter(accelkit.Callback):
    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.epochs = 0

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.epochs += 1


class Other(accelkit.Callback):
    def __init__(self) -> None:
        self.epochs = 0

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self.epochs += 1


def test_configure_callbacks_are_used_and_replace_trainer_callbacks_of_the_same_type(tmp_path):
    from_module = Counter("module")

    class WithCallbacks(Base):
        def configure_callbacks(self) -> Any:
            return [from_module]

    from_trainer, other = Counter("trainer"), Other()
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[from_trainer, other], **QUIET)
    trainer.fit(WithCallbacks(), loader())
    assert from_module.epochs == 2
    assert from_trainer.epochs == 0  # replaced
    assert other.epochs == 2  # other types are kept
    assert from_module in trainer.callbacks and from_trainer not in trainer.callbacks
    assert other in trainer.callbacks


def test_configure_callbacks_single_callback_and_checkpoint_last(tmp_path):
    """A single callback (not a list) is accepted; a ModelCheckpoint from the module is placed last, as in
    Lightning, and replaces the Trainer's default one."""
    from accelkit.callbacks import ModelCheckpoint

    checkpoint = ModelCheckpoint(dirpath=tmp_path / "mine", save_last=True)
    counter = Counter("module")

    class WithCheckpoint(Base):
        def configure_callbacks(self) -> Any:
            return [checkpoint, counter]

    trainer = quiet_trainer(tmp_path, max_epochs=1, enable_checkpointing=True, **QUIET)
    trainer.fit(WithCheckpoint(), loader())
    assert trainer.callbacks[-1] is checkpoint
    assert trainer.checkpoint_callbacks == [checkpoint]
    assert (tmp_path / "mine" / "last.ckpt").is_file()
    assert not (tmp_path / "checkpoints").exists()
    assert counter.epochs == 1


class OldHooks(RegressionModule):
    def validation_epoch_end(self, outputs: Any) -> None:
        pass

    def training_epoch_end(self, outputs: Any) -> None:
        pass


def test_lightning_1x_epoch_end_hooks_are_refused_with_their_replacement(tmp_path):
    # the ones Lightning 2.x refuses too
    with pytest.raises(NotImplementedError, match="training_epoch_end was removed.*on_train_epoch_end.*"
                                                  "validation_epoch_end was removed.*on_validation_epoch_end"):
        quiet_trainer(tmp_path, max_epochs=1).fit(OldHooks())


class DeadOldHook(RegressionModule):
    """OML's ``ExtractorModule`` still defines the 1.x ``on_epoch_start``: Lightning 2.x never calls it and runs."""

    def on_epoch_start(self) -> None:
        raise AssertionError("never called")


class DeadOldCallbackHook(accelkit.Callback):
    def on_batch_end(self, trainer: Any, pl_module: Any) -> None:
        raise AssertionError("never called")


def test_other_lightning_1x_hooks_warn_at_the_method_and_the_fit_runs(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[DeadOldCallbackHook()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(DeadOldHook())
    assert trainer.global_step > 0
    removed = [w for w in caught if "was removed in Lightning 2.0" in str(w.message)]
    assert sorted(str(w.message) for w in removed) == [
        "DeadOldCallbackHook.on_batch_end was removed in Lightning 2.0 and is never called; use on_train_batch_end",
        "DeadOldHook.on_epoch_start was removed in Lightning 2.0 and is never called; use on_train_epoch_start / "
        "on_validation_epoch_start"]
    assert {(w.filename, w.lineno) for w in removed} == {
        (__file__, DeadOldHook.on_epoch_start.__code__.co_firstlineno),
        (__file__, DeadOldCallbackHook.on_batch_end.__code__.co_firstlineno)}
    assert not [w for w in caught if "looks like a" in str(w.message)]  # not also reported as misspelt


DISTRIBUTED_HOOK_WARNINGS = """
import accelkit
from helpers.models import RegressionModule


class Net(RegressionModule):
    def on_epoch_start(self):  # a 1.x hook Lightning 2.x ignores
        pass

    def on_train_epoch_ed(self):  # a typo of on_train_epoch_end
        pass


if __name__ == "__main__":
    accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_fork", max_epochs=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False).fit(Net())
"""


@pytest.mark.slow
def test_hook_warnings_come_once_from_a_distributed_fit(tmp_path, prewarmed):
    # each worker warned (OML's script on ddp_fork printed its on_epoch_start warning twice); Lightning's are rank 0's
    script = tmp_path / "script.py"
    script.write_text(DISTRIBUTED_HOOK_WARNINGS)
    proc = prewarmed.run([str(script)], cwd=tmp_path, env=child_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("on_epoch_start was removed in Lightning 2.0") == 1, proc.stderr[-3000:]
    assert proc.stderr.count("on_train_epoch_ed looks like a Module hook") == 1, proc.stderr[-3000:]


@pytest.mark.parametrize("hook", ["on_validation_model_eval", "on_validation_model_train", "on_test_model_eval",
                                  "on_test_model_train", "on_predict_model_eval"])
def test_an_evaluation_mode_hook_without_a_trainer_says_what_it_needs(hook):
    # the hooks switch the model the Trainer runs; called on a module no Trainer runs, they say so (no bare
    # AttributeError on None)
    with pytest.raises(RuntimeError, match="RegressionModule has no Trainer: the evaluation-mode hooks"):
        getattr(RegressionModule(), hook)()
