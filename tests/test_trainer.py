"""The Trainer's features on one CPU process: real training, no mocks."""

from __future__ import annotations

import csv
import re
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
from accelkit.loggers import CSVLogger  # noqa: E402
from accelkit.strategies.single_device import SingleDeviceStrategy  # noqa: E402
from helpers.models import RegressionModule, TiedModule, quiet_trainer, regression_data  # noqa: E402

make_trainer = quiet_trainer


def weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class EpochLosses(accelkit.Callback):
    """Collects ``train_loss_epoch`` after every epoch."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.losses.append(trainer.callback_metrics["train_loss_epoch"])


# ---------------------------------------------------------------------------------------------- training
def test_loss_falls(tmp_path):
    recorder = EpochLosses()
    trainer = make_trainer(tmp_path, max_epochs=5, callbacks=[recorder])
    trainer.fit(RegressionModule())
    assert len(recorder.losses) == 5
    assert all(b < a for a, b in zip(recorder.losses, recorder.losses[1:], strict=False)), recorder.losses
    assert recorder.losses[-1] < 0.25 * recorder.losses[0]
    assert trainer.current_epoch == 5 and trainer.global_step == 20


def test_gradient_accumulation_equals_double_batch(tmp_path):
    big = RegressionModule(batch_size=8)
    make_trainer(tmp_path, max_epochs=2).fit(big)
    accumulated = RegressionModule(batch_size=4)
    trainer = make_trainer(tmp_path, max_epochs=2, accumulate_grad_batches=2)
    trainer.fit(accumulated)
    assert trainer.global_step == 8  # one optimizer step per two batches
    for key, value in weights(big).items():
        torch.testing.assert_close(weights(accumulated)[key], value, atol=1e-6, rtol=0)
    # not a trivially equal pair: a run without accumulation on the small batches ends elsewhere
    small = RegressionModule(batch_size=4)
    make_trainer(tmp_path, max_epochs=2).fit(small)
    assert not torch.allclose(weights(small)["layer.weight"], weights(big)["layer.weight"], atol=1e-3)


class GradientProbe(RegressionModule):
    """Records the total gradient norm and the largest gradient entry after ``configure_gradient_clipping`` (as in
    Lightning, ``on_before_optimizer_step`` runs before clipping)."""

    def __init__(self) -> None:
        super().__init__(lr=0.01)
        self.norms: list[float] = []
        self.maxima: list[float] = []

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        grads = [p.grad for p in self.parameters() if p.grad is not None]
        self.norms.append(float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))))
        self.maxima.append(float(max(g.abs().max() for g in grads)))


@pytest.mark.parametrize("algorithm, bound", [("norm", 0.5), ("value", 0.1)])
def test_gradient_clipping_bounds_gradients(tmp_path, algorithm, bound):
    free = GradientProbe()
    make_trainer(tmp_path, max_epochs=1).fit(free)
    measured = free.norms if algorithm == "norm" else free.maxima
    assert min(measured) > bound  # the bound really cuts these gradients
    clipped = GradientProbe()
    make_trainer(tmp_path, max_epochs=1, gradient_clip_val=bound, gradient_clip_algorithm=algorithm).fit(clipped)
    measured = clipped.norms if algorithm == "norm" else clipped.maxima
    assert len(measured) == 4
    assert max(measured) <= bound * (1 + 1e-5)
    if algorithm == "norm":  # norm clipping rescales to the bound exactly
        assert measured[0] == pytest.approx(bound, rel=1e-4)


def test_bad_clip_algorithm_is_a_clear_error(tmp_path):
    with pytest.raises(accelkit.ConfigurationError, match="gradient_clip_algorithm='max'.*'norm' or 'value'"):
        make_trainer(tmp_path, gradient_clip_val=1.0, gradient_clip_algorithm="max")


# ---------------------------------------------------------------------------------------------- optimizers
class OptimizerForms(RegressionModule):
    """``configure_optimizers`` returns whatever ``form`` names."""

    def __init__(self, form: str) -> None:
        super().__init__(lr=0.1)
        self.extra = nn.Linear(4, 1)  # trained by the second optimizer in the "list" form
        self.form = form

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x) + self.extra(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("flat", 1.0)  # never improves: ReduceLROnPlateau must cut the rate

    def configure_optimizers(self) -> Any:
        if self.form == "list":
            return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.extra.parameters(), lr=0.1)]
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        if self.form == "optimizer":
            return opt
        if self.form == "tuple":
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]
        if self.form == "dict_step":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        if self.form == "plateau":
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.1, patience=0)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "flat"}}
        if self.form == "plateau_missing":
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "nope"}}
        return "not an optimizer"


@pytest.mark.parametrize("form, lr_after", [
    ("optimizer", 0.1),
    ("tuple", 0.1 * 0.5 ** 3),  # epoch interval: three epochs, three halvings
    ("dict_step", 0.1 * 0.5 ** 12),  # step interval: 4 steps x 3 epochs
    ("plateau", 0.1 * 0.1 ** 2),  # first epoch sets the best; the next two do not improve
])
def test_configure_optimizers_forms(tmp_path, form, lr_after):
    model = OptimizerForms(form)
    before = weights(model)
    trainer = make_trainer(tmp_path, max_epochs=3)
    trainer.fit(model)
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(lr_after)
    assert not torch.equal(weights(model)["layer.weight"], before["layer.weight"])


def test_several_optimizers_need_manual_optimization(tmp_path):
    """As Lightning 2.x: one closure cannot serve two optimizers; the error says what to do instead."""
    with pytest.raises(ValueError, match="returned 2 optimizers.*automatic_optimization = False"):
        make_trainer(tmp_path, max_epochs=1).fit(OptimizerForms("list"))


def test_configure_optimizers_errors_name_the_problem(tmp_path):
    with pytest.raises(KeyError, match="'nope'.*logged metrics"):
        make_trainer(tmp_path, max_epochs=1).fit(OptimizerForms("plateau_missing"))
    with pytest.raises(TypeError, match="configure_optimizers\\(\\) returned str"):
        make_trainer(tmp_path, max_epochs=1).fit(OptimizerForms("bogus"))


# ---------------------------------------------------------------------------------------------- logging
class Logging(RegressionModule):
    """Logs values whose step and epoch aggregates are known in advance (4 batches of 8 per epoch)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self(x), y)
        self.log("idx", torch.tensor(float(batch_idx)), on_step=True, on_epoch=True, prog_bar=True)
        self.log("idx_max", float(batch_idx), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("idx_sum", float(batch_idx), on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("bar_only", 7.0, logger=False, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_const", 2.0, sync_dist=True)


def test_log_on_step_on_epoch_prog_bar_and_csv_rows(tmp_path):
    trainer = make_trainer(tmp_path, max_epochs=2, logger=CSVLogger(tmp_path), log_every_n_steps=1)
    trainer.fit(Logging())
    metrics = trainer.callback_metrics
    assert metrics["idx_epoch"] == pytest.approx(1.5)  # mean of 0..3, equal batch sizes
    assert metrics["idx_max"] == 3.0 and metrics["idx_sum"] == 6.0
    assert metrics["val_const"] == 2.0
    # a metric logged per step and per epoch is also visible under its plain name, with the epoch value
    # (so callbacks and schedulers can monitor it); values kept from the loggers too, as in Lightning
    assert metrics["idx"] == metrics["idx_epoch"] and metrics["bar_only"] == 7.0
    # the bar uses the loggers' names, as Lightning's: the last step value and, after the epoch, the epoch mean
    assert trainer.progress_bar_metrics == {"bar_only": 7.0, "idx_step": 3.0, "idx_epoch": 1.5}

    with open(trainer.logger.metrics_file, newline="") as handle:
        rows = list(csv.DictReader(handle))
    step_rows = [r for r in rows if r.get("idx_step")]
    # Lightning's steps: a row at the count of batches that stepped before it (0 for the first batch)
    assert [int(r["step"]) for r in step_rows] == list(range(0, 8))
    assert [float(r["idx_step"]) for r in step_rows] == [0.0, 1.0, 2.0, 3.0] * 2
    epoch_rows = [r for r in rows if r.get("idx_epoch")]
    assert [(int(r["epoch"]), float(r["idx_epoch"])) for r in epoch_rows] == [(0, 1.5), (1, 1.5)]
    assert all(not r.get("bar_only") for r in rows) and "bar_only" not in rows[0]
    assert [float(r["val_const"]) for r in rows if r.get("val_const")] == [2.0, 2.0]


def test_log_every_n_steps_thins_step_rows(tmp_path):
    trainer = make_trainer(tmp_path, max_epochs=2, logger=CSVLogger(tmp_path), log_every_n_steps=3)
    trainer.fit(Logging())
    with open(trainer.logger.metrics_file, newline="") as handle:
        steps = [int(r["step"]) for r in csv.DictReader(handle) if r.get("idx_step")]
    assert steps == [2, 5]  # the 3rd and 6th batches, at Lightning's steps (the batches that stepped before them)


def test_log_outside_a_run_is_an_error():
    with pytest.raises(RuntimeError, match="outside a Trainer run"):
        Logging().log("x", 1.0)


# ---------------------------------------------------------------------------------------------- other stages
def test_validate_test_predict_return_values(tmp_path):
    model = RegressionModule()
    trainer = make_trainer(tmp_path)
    x_val, y_val = regression_data(16, seed=1).tensors
    with torch.no_grad():
        expected_val = float(F.mse_loss(model(x_val), y_val))
    assert trainer.validate(model) == [{"val_loss": pytest.approx(expected_val, rel=1e-6)}]

    x_test, y_test = regression_data(16, seed=2).tensors
    with torch.no_grad():
        expected_test = float(F.mse_loss(model(x_test), y_test))
    assert trainer.test(model) == [{"test_loss": pytest.approx(expected_test, rel=1e-6)}]

    loader = DataLoader(regression_data(10, seed=3), batch_size=4)
    predictions = trainer.predict(model, loader)
    assert [p.shape for p in predictions] == [torch.Size([4, 1]), torch.Size([4, 1]), torch.Size([2, 1])]
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(predictions), model(regression_data(10, seed=3).tensors[0]))


def test_max_steps_stops_mid_epoch(tmp_path):
    trainer = make_trainer(tmp_path, max_steps=6)
    trainer.fit(RegressionModule())
    assert trainer.global_step == 6
    assert trainer.current_epoch == 2  # epoch 0 (4 steps) and the cut epoch 1 both end


class CountingModule(RegressionModule):
    """Counts the batches each loop sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = {"train": 0, "val": 0, "test": 0}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen["train"] += 1
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["val"] += 1

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.seen["test"] += 1


# The validation counts include Lightning's sanity check before training: num_sanity_val_steps=2 batches, at most
# the limit (limit_val_batches=1: one), none when validation is off.
@pytest.mark.parametrize("limits, seen", [
    (dict(limit_train_batches=2, limit_val_batches=1), {"train": 4, "val": 1 + 2, "test": 2}),
    (dict(limit_train_batches=0.5, limit_val_batches=0, limit_test_batches=1), {"train": 4, "val": 0, "test": 1}),
    (dict(limit_train_batches=100), {"train": 8, "val": 2 + 4, "test": 2}),  # more than there is: all of it
])
def test_limit_batches(tmp_path, limits, seen):
    model = CountingModule()
    trainer = make_trainer(tmp_path, max_epochs=2, **limits)
    trainer.fit(model)
    trainer.test(model)
    assert model.seen == seen


def test_fractional_limit_out_of_range_is_a_clear_error(tmp_path):
    with pytest.raises(accelkit.ConfigurationError, match=r"limit_train_batches=1.5 is a float, so a fraction: it "
                                                          r"must be in \[0, 1\]"):
        make_trainer(tmp_path, max_epochs=1, limit_train_batches=1.5)


# ---------------------------------------------------------------------------------------------- precision
class DtypeProbe(RegressionModule):
    """Records parameter, input and activation dtypes seen inside ``training_step``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[torch.dtype, torch.dtype, torch.dtype]] = set()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        out = self(x)
        self.seen.add((self.layer.weight.dtype, x.dtype, out.dtype))
        return F.mse_loss(out.float(), y.float())


def test_precision_64_true_trains_in_float64(tmp_path):
    model = DtypeProbe()
    make_trainer(tmp_path, max_epochs=1, precision="64-true").fit(model)
    assert model.seen == {(torch.float64, torch.float64, torch.float64)}
    assert model.layer.weight.dtype == torch.float64


def test_precision_bf16_mixed_autocasts_activations_keeps_fp32_weights(tmp_path):
    model = DtypeProbe()
    before = weights(model)
    make_trainer(tmp_path, max_epochs=1, precision="bf16-mixed").fit(model)
    assert model.seen == {(torch.float32, torch.float32, torch.bfloat16)}
    assert model.layer.weight.dtype == torch.float32
    assert not torch.equal(model.layer.weight, before["layer.weight"])


# ---------------------------------------------------------------------------------------------- weight tying
class MetaStrategy(SingleDeviceStrategy):
    """A single-device strategy whose device is ``meta``, so a move is observable on a CPU-only machine."""

    @property
    def root_device(self) -> torch.device:
        return torch.device("meta")


def test_tied_weights_stay_tied_and_hook_runs_after_the_move(tmp_path):
    # CPU -> meta replaces every Parameter object (as a move to any device whose tensors cannot share storage
    # with the CPU's does), which unties plain nn.Module.to(); the strategy must re-tie.
    untied = TiedModule().to("meta")
    assert untied.decoder.weight is not untied.encoder.weight  # the premise: .to() alone breaks the tie
    strategy = MetaStrategy()
    strategy.connect(None, [0], 1, None)
    model = TiedModule()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no parameter-count warning for a preserved tie
        moved = strategy.module_to_device(model)
    assert model.events == ["post_move:meta:torch.float32"]  # the hook ran once, and saw the moved weights
    assert moved.decoder.weight is moved.encoder.weight
    assert moved.encoder.weight.device.type == "meta"
    assert len(list(moved.parameters())) == 1


def test_tied_weights_survive_a_fit(tmp_path):
    model = TiedModule()
    before = weights(model)
    make_trainer(tmp_path, max_epochs=1).fit(model)
    assert model.decoder.weight is model.encoder.weight
    assert model.events == ["post_move:cpu:torch.float32"]
    assert not torch.equal(model.encoder.weight, before["encoder.weight"])


def test_hook_that_breaks_a_tie_warns(tmp_path):
    model = TiedModule(break_tie=True)
    with pytest.warns(UserWarning, match="1 distinct parameters before the move to cpu and 2 after"):
        make_trainer(tmp_path, max_epochs=1).fit(model)
    assert model.decoder.weight is not model.encoder.weight
    strategy = MetaStrategy()
    strategy.connect(None, [0], 1, None)
    with pytest.warns(UserWarning, match="before the move to meta and 2 after"):
        strategy.module_to_device(TiedModule(break_tie=True))


def test_a_short_epoch_still_shows_its_metrics_in_the_progress_bar(tmp_path, capsys):
    # 4 steps per epoch, far fewer than log_every_n_steps: the bar is refreshed once at the epoch's end.
    trainer = make_trainer(tmp_path, max_epochs=1, enable_progress_bar=True, log_every_n_steps=50)
    trainer.fit(RegressionModule())
    out = capsys.readouterr().out  # the bar draws on standard output, as Lightning's
    assert trainer.global_step == 4
    final = out.rsplit("Epoch 0", 1)[-1]
    assert "4/4" in final and "train_loss=" in final, out


# ---------------------------------------------------------------------------------------------- run attributes
class AttributeProbe(accelkit.Callback):
    """Reads Lightning's Trainer attributes from inside the loops."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.seen.setdefault("train_loader", trainer.train_dataloader)
        self.seen.setdefault("evaluating_in_training", trainer.evaluating)

    def on_validation_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self.seen.setdefault("val_loaders", trainer.val_dataloaders)
        self.seen["evaluating_in_validation"] = trainer.evaluating


def test_lightning_run_attributes_are_readable(tmp_path):
    probe = AttributeProbe()
    trainer = quiet_trainer(tmp_path, max_epochs=1, limit_train_batches=3, limit_val_batches=0.5, callbacks=[probe])
    assert trainer.train_dataloader is None  # nothing prepared before a run
    model = RegressionModule()
    trainer.fit(model)
    assert isinstance(probe.seen["train_loader"], DataLoader)
    assert probe.seen["train_loader"].dataset is not None
    assert isinstance(probe.seen["val_loaders"], DataLoader)
    assert probe.seen["evaluating_in_training"] is False and probe.seen["evaluating_in_validation"] is True
    assert (trainer.limit_train_batches, trainer.limit_val_batches) == (3, 0.5)
    assert trainer.limit_test_batches == 1.0 and trainer.limit_predict_batches == 1.0  # not given: all, as Lightning
    assert trainer.distributed_sampler_kwargs is None  # one process


class EmptyOnRankOne(RegressionModule):
    """Rank 1 gets an empty validation loader; opting in with the Lightning attribute allows it."""

    def __init__(self, allow: bool) -> None:
        super().__init__()
        self.allow_zero_length_dataloader_with_multiple_devices = allow

    def val_dataloader(self) -> DataLoader:
        data = regression_data(16, seed=1)
        if self.global_rank == 1:
            data = torch.utils.data.Subset(data, [])
        return DataLoader(data, batch_size=8)


def run_empty_loader_scenario(root: str) -> None:
    """Run in a process of its own by the test below (forked from the prewarmed interpreter, which ran nothing on a
    GPU: its ``ddp_fork`` workers are forks of it; the claim is the refusal on rank 1, not the start method, and
    ``ddp_fork`` reports a worker's error as ``ddp_spawn`` does, without two fresh interpreters importing torch).
    Writes the error's type and message to ``error.txt``."""
    trainer = quiet_trainer(root, max_epochs=1, devices=2, strategy="ddp_fork", num_sanity_val_steps=0)
    try:
        trainer.fit(EmptyOnRankOne(allow=False))
    except Exception as exc:  # noqa: BLE001 - the test reads the type and the message
        Path(root, "error.txt").write_text(f"{type(exc).__module__}.{type(exc).__qualname__}\n{exc}")


@pytest.mark.slow
def test_an_empty_loader_on_one_rank_is_refused_unless_allowed(tmp_path, prewarmed):
    from helpers.guards import child_env

    code = f"import test_trainer as t; t.run_empty_loader_scenario({str(tmp_path)!r})"
    proc = prewarmed.run(["-c", code], cwd=tmp_path, env=child_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    kind, message = (tmp_path / "error.txt").read_text().split("\n", 1)
    assert kind == f"{accelkit.WorkerError.__module__}.{accelkit.WorkerError.__qualname__}", message
    assert re.search("val loader 0 is empty on rank 1 of 2.*allow_zero_length_dataloader_with_multiple_devices",
                     message), message


class KeepsNormFrozen(RegressionModule):
    """Returns to training after validation but keeps a frozen sub-module in eval mode (a Lightning idiom)."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = nn.BatchNorm1d(4)
        self.frozen_modes: list[bool] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.frozen_modes.append(self.frozen.training)
        return super().training_step(batch, batch_idx)

    def on_train_start(self) -> None:
        self.frozen.eval()

    def on_validation_model_train(self) -> None:
        self.train()
        self.frozen.eval()


def test_on_validation_model_train_decides_the_mode_after_validation(tmp_path):
    model = KeepsNormFrozen()
    quiet_trainer(tmp_path, max_epochs=2, num_sanity_val_steps=0).fit(model)
    assert len(model.frozen_modes) == 8 and not any(model.frozen_modes)


class KeepsNormFrozenByDefault(KeepsNormFrozen):
    """The same without the override: the loop restores each sub-module's own mode after validation."""

    on_validation_model_train = accelkit.Module.on_validation_model_train


def test_validation_restores_each_submodules_mode(tmp_path):
    model = KeepsNormFrozenByDefault()
    quiet_trainer(tmp_path, max_epochs=2).fit(model)
    assert len(model.frozen_modes) == 8 and not any(model.frozen_modes)
    assert model.layer.training  # the rest trains


class PlateauOnStepLoss(RegressionModule):
    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "train_loss"}}


def test_a_scheduler_can_monitor_a_metric_logged_per_step_and_per_epoch(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    trainer.fit(PlateauOnStepLoss())
    assert trainer.callback_metrics["train_loss"] == trainer.callback_metrics["train_loss_epoch"]


def test_the_module_reads_the_trainers_counters_after_fit(tmp_path):
    trainer = quiet_trainer(tmp_path, max_epochs=2)
    model = RegressionModule()
    trainer.fit(model)
    assert (model.current_epoch, model.global_step) == (trainer.current_epoch, trainer.global_step) == (2, 8)


class TrainOnly(accelkit.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)


def test_test_without_a_test_step_is_an_error_naming_the_method(tmp_path):
    loader = DataLoader(regression_data(8), batch_size=4)
    with pytest.raises(NotImplementedError, match=r"TrainOnly.test_step\(batch, batch_idx\)"):
        quiet_trainer(tmp_path).test(TrainOnly(), loader)
    with pytest.raises(NotImplementedError, match=r"TrainOnly.validation_step\(batch, batch_idx\)"):
        quiet_trainer(tmp_path).validate(TrainOnly(), loader)


class SkipsSecondBatch(RegressionModule):
    """Zero weights, SGD lr=1; training_step returns None on batch 1."""

    def __init__(self) -> None:
        super().__init__(lr=1.0)
        nn.init.zeros_(self.layer.weight)
        nn.init.zeros_(self.layer.bias)
        self.weights: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        return None if batch_idx == 1 else loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.weights.append(self.layer.weight.detach().clone())


def test_a_skipped_batch_moves_no_weight(tmp_path):
    """As Lightning's closure: the gradients are zeroed, no backward runs, the step moves nothing."""
    model = SkipsSecondBatch()
    quiet_trainer(tmp_path, max_epochs=1, limit_train_batches=3, num_sanity_val_steps=0,
                  limit_val_batches=0).fit(model)
    assert not torch.equal(model.weights[0], torch.zeros_like(model.weights[0]))
    torch.testing.assert_close(model.weights[1], model.weights[0], rtol=0, atol=0)
    assert not torch.equal(model.weights[2], model.weights[1])


class MonitoredStepLR(RegressionModule):
    """A StepLR whose dict carries a 'monitor' key (Lightning users leave it there for any scheduler)."""

    def __init__(self) -> None:
        super().__init__()
        self.lrs: list[float] = []

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=1.0)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, 0.5),
                                                   "monitor": "val_loss"}}

    def on_train_epoch_start(self) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])


def test_monitor_is_only_used_by_plateau_schedulers(tmp_path):
    model = MonitoredStepLR()
    quiet_trainer(tmp_path, max_epochs=4).fit(model)
    assert model.lrs == [1.0, 0.5, 0.25, 0.125]  # stepped without the metric (it is not an epoch number)


class TwoLoadersNoIndex(RegressionModule):
    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(regression_data(8, seed=1), batch_size=4), DataLoader(regression_data(8, seed=2),
                                                                                 batch_size=4)]


def test_several_loaders_need_a_dataloader_idx_parameter(tmp_path):
    with pytest.raises(TypeError, match="validation_step runs over 2 loaders but takes no dataloader_idx"):
        quiet_trainer(tmp_path, max_epochs=1).validate(TwoLoadersNoIndex())


class StepsWithoutBatchIdx(RegressionModule):
    """Steps that take the batch alone, as a Lightning user writes them (eMapR/sundial's ``validation_step(self,
    batch)``): Lightning passes ``batch_idx`` only to a step that takes it."""

    def validation_step(self, batch: Any) -> None:  # type: ignore[override]
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch: Any) -> None:  # type: ignore[override]
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return self(batch[0])


def test_evaluation_and_prediction_steps_may_omit_batch_idx(tmp_path):
    model = StepsWithoutBatchIdx()
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)  # its sanity check and validation call validation_step(batch)
    assert "val_loss" in trainer.callback_metrics
    assert "test_loss" in trainer.test(model, verbose=False)[0]
    loader = DataLoader(regression_data(8, seed=1), batch_size=4)
    predictions = trainer.predict(model, loader)
    assert [p.shape for p in predictions] == [torch.Size([4, 1])] * 2


class WholeBatchForward(accelkit.Module):
    """A module whose forward takes the whole ``(input, target)`` batch, as Lightning's default predict_step does."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, batch: Any) -> torch.Tensor:
        x, _ = batch
        return self.layer(x)


def test_the_default_predict_step_passes_the_whole_batch_to_forward_as_lightning(tmp_path):
    """Lightning's default ``predict_step`` is ``self(batch)``; accelkit's passed ``batch[0]`` of a list or tuple
    batch, so a forward that unpacks ``x, y = batch`` got the rows of ``x`` (silently, for two rows)."""
    model = WholeBatchForward()
    predictions = quiet_trainer(tmp_path).predict(model, DataLoader(regression_data(8, seed=1), batch_size=2))
    assert [p.shape for p in predictions] == [torch.Size([2, 1])] * 4
    x = torch.cat([x for x, _ in DataLoader(regression_data(8, seed=1), batch_size=2)])
    torch.testing.assert_close(torch.cat(predictions), model.layer(x))


class WithLBFGS(RegressionModule):
    """LBFGS (its step evaluates the loss several times through the closure), counting the evaluations."""

    def __init__(self) -> None:
        super().__init__()
        self.steps_run, self.before_steps = 0, 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps_run += 1
        x, y = batch
        return F.mse_loss(self(x), y)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        self.before_steps += 1

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=3)


def test_an_optimizer_that_evaluates_its_closure_steps_as_in_torch(tmp_path):
    """Lightning passes its closure to ``optimizer.step`` and LBFGS calls it several times per step; accelkit ran
    the closure once and refused such optimizers (``NotImplementedError``: a user's sine-wave LSTM with LBFGS,
    ``tests/conformance/user_sine_lbfgs.py``). Now every evaluation runs ``training_step`` and backward again,
    with ``on_before_optimizer_step`` after each (as Lightning's wrapped closure), one global step per batch, and
    the weights are those of torch's own loop."""
    model = WithLBFGS()
    reference = WithLBFGS()
    reference.load_state_dict(model.state_dict())
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    optimizer = torch.optim.LBFGS(reference.parameters(), lr=0.5, max_iter=3)
    evaluations = 0
    for x, y in DataLoader(regression_data(32), batch_size=8):
        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            nonlocal evaluations
            evaluations += 1
            optimizer.zero_grad()
            loss = F.mse_loss(reference(x), y)
            loss.backward()
            return loss
        optimizer.step(closure)
    assert trainer.global_step == 4
    assert model.steps_run == evaluations > 4
    assert model.before_steps == evaluations
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], tensor)


class ManualLBFGS(WithLBFGS):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()

        def closure() -> torch.Tensor:
            self.steps_run += 1
            opt.zero_grad()
            x, y = batch
            loss = F.mse_loss(self(x), y)
            self.manual_backward(loss)
            return loss

        opt.step(closure=closure)


def test_manual_optimization_steps_lbfgs_with_the_users_closure(tmp_path):
    """``opt.step(closure=closure)`` with LBFGS in manual optimization: the optimizer evaluates the user's
    closure as often as it needs (accelkit refused it), and the step counts once."""
    model = ManualLBFGS()
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(model)
    assert trainer.global_step == 4
    assert model.steps_run > 4 and model.before_steps == model.steps_run


class OwnStepStrategy(SingleDeviceStrategy):
    """A single-device strategy with its own optimizer step (which knows nothing of a closure)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        return bool(optimizer.step())


def test_an_optimizer_that_evaluates_its_closure_is_refused_where_its_step_is_not_the_default(tmp_path):
    """A strategy (or a precision: a gradient scaler) with its own optimizer step would step LBFGS without a
    closure: refused before the fit trains, naming the optimizer, the strategy and what works."""
    model = WithLBFGS()
    with pytest.raises(NotImplementedError, match=r"LBFGS\.step\(\) re-evaluates the loss through its closure.*"
                                                  r"strategy OwnStepStrategy.*precision='32-true'"):
        quiet_trainer(tmp_path, max_epochs=1, strategy=OwnStepStrategy()).fit(model)
    assert model.steps_run == 0


def test_a_trainer_and_its_logger_are_freed_after_fit(tmp_path):
    """Nothing the run registers keeps the Trainer alive: a process that builds many Trainers (an optuna study)
    does not keep every one, with its logger's open event file, until it exits."""
    import gc
    import weakref

    def one_fit() -> tuple[weakref.ref, weakref.ref]:
        trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False,
                                   enable_model_summary=False, default_root_dir=tmp_path)
        trainer.fit(RegressionModule())
        return weakref.ref(trainer), weakref.ref(trainer.logger)

    trainer, logger = one_fit()
    gc.collect()
    assert trainer() is None and logger() is None


# ------------------------------------------------------------------------------------------------- run state
READ_ONLY = ("current_epoch", "global_step", "callback_metrics", "logged_metrics", "progress_bar_metrics",
             "is_last_batch", "num_training_batches", "num_val_batches", "num_sanity_val_batches",
             "num_test_batches", "num_predict_batches", "state")


@pytest.mark.parametrize("name", READ_ONLY)
def test_progress_names_are_read_only_as_in_lightning(tmp_path: Path, name: str) -> None:
    trainer = make_trainer(tmp_path)
    with pytest.raises(AttributeError, match=name):
        setattr(trainer, name, 3)


def test_should_stop_is_settable_as_in_lightning(tmp_path: Path) -> None:
    class StopAfterFirstBatch(accelkit.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            trainer.should_stop = True

    trainer = make_trainer(tmp_path, max_epochs=3, callbacks=[StopAfterFirstBatch()])
    trainer.should_stop = True
    assert trainer.should_stop is True and trainer.run_state.progress.should_stop is True
    trainer.fit(RegressionModule(), DataLoader(regression_data(), batch_size=8))
    assert (trainer.current_epoch, trainer.global_step, trainer.should_stop) == (1, 1, True)


def test_snapshot_restore_puts_settings_and_progress_back(tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path, max_epochs=2, limit_train_batches=2)
    trainer.fit(RegressionModule(), DataLoader(regression_data(), batch_size=8))
    saved = trainer.snapshot()
    trainer.replace_settings(max_epochs=5, limit_train_batches=1)
    trainer.run_state.progress.load_state_dict({"epoch": 0, "global_step": 0})
    trainer.callback_metrics["trial"] = torch.tensor(1.0)
    trainer.restore(saved)
    assert (trainer.max_epochs, trainer.limit_train_batches) == (2, 2)
    assert (trainer.current_epoch, trainer.global_step) == (2, 4)
    assert "trial" not in trainer.callback_metrics


class TwoLoaderEval(accelkit.Module):
    """Logs per loader: ``v`` (its batches' values), so each loader's mean is a known float."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("v", batch[0].sum() / 3)

    test_step = validation_step


def test_verbose_evaluation_prints_lightnings_rows_and_full_values(tmp_path, capsys):
    """As Lightning's table: one row per metric name, the ``/dataloader_idx_N`` suffix dropped (the column says
    the loader), each value in full (``str`` of the float), a loader without the metric left blank."""
    from torch.utils.data import TensorDataset

    loaders = [DataLoader(TensorDataset(torch.tensor([[1.0], [2.0]])), batch_size=1),
               DataLoader(TensorDataset(torch.tensor([[4.0]])), batch_size=1)]
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    results = trainer.validate(TwoLoaderEval(), loaders, verbose=True)
    out = capsys.readouterr().out
    assert "dataloader_idx" not in out
    row = next(line for line in out.splitlines() if line.startswith("v "))
    first, second = (float(results[i][f"v/dataloader_idx_{i}"]) for i in (0, 1))
    assert row.split("|")[1].strip() == str(first) and row.split("|")[2].strip() == str(second)
    assert str(first) == "0.5" and len(str(second)) > 8  # 4/3 in full, not rounded to 6 digits
    assert "Validate metric" in out and "DataLoader 1" in out


@pytest.fixture(scope="module")
def lightning_runs(tmp_path_factory) -> dict[str, dict[str, list[Any]]]:
    """What each side-by-side helper of this module recorded under Lightning's Trainer, for every scenario: all in
    one process (one import of Lightning and torch_xla for the three)."""
    from helpers.fixtures import lightning_records_of

    return lightning_records_of(tmp_path_factory.mktemp("lightning"),
                                ["trainer_states", "trainer_counts", "spawn_caller_reads"])


@pytest.fixture
def lightning_states(lightning_runs) -> dict[str, list[Any]]:
    """What ``helpers.trainer_states`` recorded under Lightning's Trainer, for every scenario."""
    return lightning_runs["trainer_states"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["all_stages", "raises", "ddp_fork_caller"])
def test_the_stage_and_trainer_state_read_as_in_lightning(tmp_path, lightning_states, scenario):
    """``setup``/``teardown`` get Lightning's ``TrainerFn`` member and ``trainer.state``'s ``fn``, ``stage`` and
    ``status`` are ``TrainerFn``, ``RunningStage`` and ``TrainerStatus`` members as in Lightning, in every hook of
    fit (with a sanity check), validate, test and predict, after each, and after a fit that raised: the same type
    name, ``repr``, ``str``, formatting, comparison with strings in any case, hashing and ``value``/``name``
    (``helpers.trainer_states``); with them the Trainer's stage flags. Before, the stages were plain strings
    (``f"{stage}"`` was ``"fit"`` where Lightning's is ``"TrainerFn.FITTING"``, ``stage.value`` failed), there was no
    ``state.status``, ``state.stage`` stayed set after a run, ``trainer.evaluating`` was false during the sanity
    check, and after a ``ddp_fork`` fit the caller's state had no ``fn`` (Lightning's: ``FITTING``, ``FINISHED``); the
    profiler's ``setup``/``teardown`` got a plain string where Lightning's gets the ``TrainerFn`` member."""
    from helpers.trainer_states import record

    assert record("accelkit", str(tmp_path), scenario) == lightning_states[scenario]


@pytest.fixture
def lightning_counts(lightning_runs) -> dict[str, list[Any]]:
    """What ``helpers.trainer_counts`` recorded under Lightning's Trainer, for every scenario."""
    return lightning_runs["trainer_counts"]


@pytest.mark.slow
def test_counters_batch_counts_and_metrics_after_evaluation_read_as_in_lightning(tmp_path, lightning_counts):
    """``current_epoch``, ``global_step``, ``num_training_batches``, ``num_val_batches``, ``num_sanity_val_batches``
    and ``estimated_stepping_batches`` read from every hook of a fit, and the three metric dicts after ``validate``
    and ``test`` following it, under limits (ints and fractions), accumulation (with a partial window, and with a
    limit), ``max_steps``, a mid-epoch validation of two loaders and sanity checks of one batch, of all batches and
    none, and ``fast_dev_run=2`` (``helpers.trainer_counts``), as on Lightning's Trainer, with the
    ``limit_*_batches`` read there. Before, ``num_sanity_val_batches`` was ``[]`` in a fit whose sanity check did not
    run (``num_sanity_val_steps=0``) where Lightning's is ``[0]`` per loader: it is computed as Lightning's,
    ``num_sanity_val_steps`` capped by each validation loader's count; and a ``limit_*_batches`` not given read
    ``None`` where Lightning's is ``1.0`` (``trainer.limit_val_batches < 1`` raised ``TypeError``). Also read once the
    Trainer is made and after ``predict``, and with a ``Timer`` or ``max_time`` and no ``max_epochs``: before,
    ``num_training_batches`` was ``None`` before the training loader was loaded and outside ``fit`` (Lightning's:
    ``inf``, then the latest fit's count), ``num_val_batches`` was ``[]`` in ``test``/``predict`` (Lightning's: the
    fit's), ``num_sanity_val_steps=-1`` read ``-1`` (Lightning's: ``inf``), and a fit bounded by a Timer or
    ``max_time`` got ``max_epochs=1000`` (Lightning's: ``-1``). Before, with loaders without a length (``no_length``),
    the batch counts read ``None`` where Lightning's read ``inf``, and ``estimated_stepping_batches`` ``inf`` where
    Lightning's reads ``max_steps``."""
    from helpers.trainer_counts import SCENARIOS, record

    ours = {scenario: record("accelkit", str(tmp_path / scenario), scenario) for scenario in SCENARIOS}
    assert ours == lightning_counts


@pytest.fixture
def lightning_spawn_caller_reads(lightning_runs) -> dict[str, list[Any]]:
    """What ``helpers.spawn_caller_reads`` recorded under Lightning's Trainer, for every scenario."""
    return lightning_runs["spawn_caller_reads"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["fit_then_validate", "validate_then_fit"])
def test_the_callers_trainer_after_a_run_in_worker_processes_reads_as_in_lightning(
        tmp_path, lightning_spawn_caller_reads, scenario):
    """After a fit or validate in worker processes (``ddp_fork``; what the caller reads is the launcher's hand-back,
    the same for ``ddp_spawn``: ``helpers.spawn_caller_reads``) the caller's Trainer, which loaded no loader, reads
    Lightning's caller's batch counts (``inf``, ``[]``; before, ``num_training_batches`` read ``None``) and state. It
    differs on purpose (``tests/data/migration_rows.toml``): it holds rank 0's ``current_epoch`` and ``global_step``
    and the last run's three metric dicts, as after a run in one process, where Lightning's caller reads ``0``, empty
    dicts and ``callback_metrics`` merged into the previous run's."""
    from helpers.spawn_caller_reads import record

    ours, theirs = record("accelkit", str(tmp_path), scenario), lightning_spawn_caller_reads[scenario]
    assert [row[:3] + row[5:7] for row in ours] == [row[:3] + row[5:7] for row in theirs]
    counters = {row[0]: row[3:5] for row in ours}
    assert counters["after fit"] == [2, 4]  # 2 epochs of 2 batches per rank
    names = {row[0]: row[7] for row in ours}
    assert names["after fit"] == [["train_loss", "val_loss"]] * 3
    assert names["after validate"] == [["val_loss"]] * 3
