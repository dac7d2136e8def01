"""``accelkit.tuner.Tuner``: the learning-rate range test and the batch-size search (units, on the CPU).

Out-of-memory errors are real: past a chosen batch size the model asks torch's CPU allocator for a buffer no
machine has (2**50 bytes), and the CPU accelerator recognises the allocator's refusal.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.errors import ConfigurationError
from accelkit.tuner import LRFinder, Tuner


def _data(n: int = 256) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True) * 0.3)


def _exhaust_host_memory() -> None:
    torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: the allocator refuses at once ("can't allocate memory")


class Core(accelkit.Module):
    """Steps and optimizer, no loaders. ``memory_limit``: the largest batch that fits in "memory"."""

    def __init__(self, lr: float = 0.01, memory_limit: int | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        self.seen_lrs: list[float] = []
        self.training_steps = 0

    def _loss(self, batch):
        x, y = batch
        if self.hparams.memory_limit is not None and x.shape[0] > self.hparams.memory_limit:
            _exhaust_host_memory()
        return nn.functional.mse_loss(self.net(x), y)

    def training_step(self, batch, batch_idx):
        self.training_steps += 1
        self.seen_lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def predict_step(self, batch, batch_idx):
        return self._loss(batch)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Regressor(Core):
    """Full-batch regression by default (a smooth loss curve), loaders built from ``hparams.batch_size``."""

    def __init__(self, lr: float = 0.01, batch_size: int = 256, memory_limit: int | None = None,
                 samples: int = 256) -> None:
        super().__init__(lr=lr, memory_limit=memory_limit)

    def train_dataloader(self):
        return DataLoader(_data(self.hparams.samples), batch_size=self.hparams.batch_size)

    val_dataloader = predict_dataloader = train_dataloader


def _trainer(tmp_path, **kwargs) -> accelkit.Trainer:
    options = dict(accelerator="cpu", devices=1, max_epochs=1, enable_progress_bar=False,
                   enable_model_summary=False, default_root_dir=tmp_path)
    options.update(kwargs)
    return accelkit.Trainer(**options)


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------------------------- lr_find
def test_lr_find_sweeps_and_puts_the_model_and_trainer_back(tmp_path):
    accelkit.seed_everything(0)
    model = Regressor()
    trainer = _trainer(tmp_path, max_epochs=3)  # the default logger and checkpoint callback
    weights, callbacks, loggers = _weights(model), trainer.callbacks, trainer.loggers
    settings = {name: getattr(trainer, name) for name in ("max_steps", "max_epochs", "limits", "global_step",
                                                          "current_epoch", "num_sanity_val_steps")}

    finder = Tuner(trainer).lr_find(model, min_lr=1e-4, max_lr=10, num_training=40, early_stop_threshold=None)

    assert isinstance(finder, LRFinder) and not finder.stopped_early
    lrs = finder.results["lr"]
    assert len(lrs) == len(finder.results["loss"]) == len(finder.raw_losses) == 40
    assert lrs[0] == pytest.approx(1e-4) and lrs[-1] == pytest.approx(10)
    ratios = [b / a for a, b in zip(lrs, lrs[1:], strict=False)]
    assert max(ratios) == pytest.approx(min(ratios)) and ratios[0] == pytest.approx(10 ** (5 / 39))
    # every step trained with the learning rate the sweep recorded for it, none with the module's own
    assert model.seen_lrs == pytest.approx(lrs)
    # the module, the Trainer and its settings are as before; nothing was logged or checkpointed
    assert _same(_weights(model), weights) and all(m.training for m in model.modules())
    assert all(p.grad is None for p in model.parameters())
    assert trainer.callbacks is callbacks and trainer.loggers is loggers
    assert {name: getattr(trainer, name) for name in settings} == settings
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # (the run's version folder is claimed, empty)
    # update_attr=True (the default) set the suggestion where the module keeps its learning rate
    assert model.hparams.lr == finder.suggestion()
    # the real fit afterwards runs as configured
    model.seen_lrs.clear()
    trainer.fit(model)
    assert trainer.global_step == 3 and model.seen_lrs == [finder.suggestion()] * 3
    assert (tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=2-step=3.ckpt").is_file()


def test_the_suggestion_lies_in_the_falling_part_of_the_curve(tmp_path):
    accelkit.seed_everything(1)
    model = Regressor()
    finder = Tuner(_trainer(tmp_path, logger=False, enable_checkpointing=False)).lr_find(
        model, min_lr=1e-4, max_lr=10, update_attr=False)
    losses = finder.results["loss"]
    suggested = finder.suggestion()
    index = finder.optimal_index
    lowest = min(range(len(losses)), key=losses.__getitem__)
    assert suggested == finder.results["lr"][index] and 10 <= index < lowest
    assert losses[lowest] < 0.6 * losses[0]  # the curve does fall
    assert losses[index + 1] < losses[index - 1] and losses[lowest] < losses[index] < losses[0]
    assert model.hparams.lr == 0.01  # update_attr=False


def test_lr_find_stops_early_once_the_loss_diverges(tmp_path):
    accelkit.seed_everything(0)
    model = Regressor()
    finder = Tuner(_trainer(tmp_path, logger=False, enable_checkpointing=False)).lr_find(
        model, min_lr=1e-3, max_lr=1e4, num_training=100, update_attr=False)
    losses = finder.results["loss"]
    assert finder.stopped_early and 10 < len(losses) < 100 and model.training_steps == len(losses)
    assert not losses[-1] <= 4 * min(losses)  # diverged: above four times the best loss (or not a number)
    assert all(losses[i] <= 4 * min(losses[:i + 1]) for i in range(len(losses) - 1))


def test_linear_mode_and_gradient_accumulation(tmp_path):
    model = Regressor(batch_size=32)
    trainer = _trainer(tmp_path, logger=False, enable_checkpointing=False, accumulate_grad_batches=2)
    finder = Tuner(trainer).lr_find(model, min_lr=0.0, max_lr=0.2, num_training=11, mode="linear",
                                    early_stop_threshold=None, update_attr=False)
    assert finder.results["lr"] == pytest.approx([0.02 * i for i in range(11)])
    assert model.training_steps == 22  # two batches per optimizer step
    assert model.seen_lrs == pytest.approx([0.02 * (i // 2) for i in range(22)])
    assert trainer.accumulate_grad_batches == 2


class ScheduledAdam(Regressor):
    """Keeps its optimizer between fits and decays the learning rate every step."""

    def __init__(self, learning_rate: float = 0.05) -> None:
        super().__init__()
        self.learning_rate = learning_rate
        self.optimizer = torch.optim.Adam(self.parameters(), lr=learning_rate)

    def configure_optimizers(self):
        scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5)
        return {"optimizer": self.optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def test_schedulers_rest_during_the_sweep_and_a_kept_optimizer_gets_its_state_back(tmp_path):
    model = ScheduledAdam()
    finder = Tuner(_trainer(tmp_path, logger=False, enable_checkpointing=False)).lr_find(
        model, min_lr=1e-4, max_lr=1, num_training=20, early_stop_threshold=None)
    assert model.seen_lrs == pytest.approx(finder.results["lr"])  # StepLR did not halve them
    assert not model.optimizer.state  # no Adam moments kept
    assert [group["lr"] for group in model.optimizer.param_groups] == [0.05]
    # lr is looked for before learning_rate (as in Lightning): hparams.lr gets the suggestion
    assert model.hparams.lr == finder.suggestion() and model.learning_rate == 0.05


def test_update_attr_finds_learning_rate_and_attr_name_and_fails_before_training(tmp_path):
    class Plain(Regressor):
        def __init__(self):
            super().__init__()
            del self.hparams["lr"]  # keep the learning rate as an attribute only
            self.learning_rate, self.my_lr = 0.01, 0.01

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.learning_rate)

    trainer = _trainer(tmp_path, logger=False, enable_checkpointing=False)
    model = Plain()
    finder = Tuner(trainer).lr_find(model, num_training=20)
    assert model.learning_rate == finder.suggestion() and model.my_lr == 0.01
    finder = Tuner(trainer).lr_find(model, num_training=20, attr_name="my_lr")
    assert model.my_lr == finder.suggestion()
    model.training_steps = 0
    with pytest.raises(AttributeError, match="attr_name='nope'.*update_attr=False"):
        Tuner(trainer).lr_find(model, attr_name="nope")
    del model.learning_rate
    with pytest.raises(AttributeError, match="lr or self.learning_rate"):
        Tuner(trainer).lr_find(model)
    assert model.training_steps == 0  # refused before any step


def test_the_suggestion_needs_two_points():
    finder = LRFinder("exponential", 1e-3, 1.0, 5)
    finder.results = {"lr": [1e-3, 1e-2, 1e-1], "loss": [1.0, 0.5, 0.2]}
    with pytest.warns(UserWarning, match="0 usable point"):
        assert finder.suggestion() is None and finder.optimal_index is None
    assert finder.suggestion(skip_begin=0, skip_end=0) == 1e-3  # same descent per decade: the first point
    finder.results["loss"] = [1.0, 1.5, 3.0]  # rising from the start: nothing falls
    with pytest.warns(UserWarning, match="lower min_lr"):
        assert finder.suggestion(skip_begin=0, skip_end=0) is None
    with pytest.raises(ValueError, match="skip_end=-1"):
        finder.suggestion(skip_end=-1)


def test_plot_names_matplotlib_when_it_is_missing(monkeypatch):
    finder = LRFinder("exponential", 1e-3, 1.0, 3)
    finder.results = {"lr": [1e-3, 1e-2, 1e-1], "loss": [1.0, 0.5, 0.2]}
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what Python does for a package that is not there
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        finder.plot()


def test_plot_draws_the_curve_and_marks_the_suggestion(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    finder = Tuner(_trainer(tmp_path, logger=False, enable_checkpointing=False)).lr_find(
        Regressor(), min_lr=1e-4, max_lr=10, num_training=30, update_attr=False)
    figure = finder.plot(suggest=True)
    ax = figure.axes[0]
    curve, mark = ax.lines
    assert list(curve.get_xdata()) == finder.results["lr"] and ax.get_xscale() == "log"
    assert list(mark.get_xdata()) == [finder.suggestion()]
    figure.savefig(tmp_path / "lr.png")
    assert (tmp_path / "lr.png").stat().st_size > 0


def test_lr_find_refuses_what_it_cannot_do(tmp_path):
    tuner = Tuner(_trainer(tmp_path, logger=False, enable_checkpointing=False))
    model = Regressor()
    with pytest.raises(ValueError, match="method='validate'"):
        tuner.lr_find(model, method="validate")
    with pytest.raises(ConfigurationError, match="dataloaders= is for"):
        tuner.lr_find(model, dataloaders=model.train_dataloader())
    with pytest.raises(ConfigurationError) as info:
        tuner.lr_find(model, min_lr=1.0, max_lr=0.1, mode="cosine", num_training=0, early_stop_threshold=-1)
    text = str(info.value)
    for part in ("mode='cosine'", "num_training=0", "early_stop_threshold=-1"):
        assert part in text
    with pytest.raises(ConfigurationError, match="min_lr=1.0 must be smaller than max_lr=0.1"):
        tuner.lr_find(model, min_lr=1.0, max_lr=0.1)

    class TwoOptimizers(Regressor):
        automatic_optimization = False

        def configure_optimizers(self):
            return [torch.optim.SGD(self.net[0].parameters(), lr=0.1), torch.optim.SGD(self.net[2].parameters())]

    with pytest.raises(ConfigurationError, match="returned 2"):
        tuner.lr_find(TwoOptimizers())
    assert tuner.trainer.callbacks == [] and tuner.trainer.global_step == 0
    with pytest.raises(TypeError, match="accelkit.Trainer"):
        Tuner(object())
    with pytest.warns(UserWarning, match=r"val_dataloaders=\.\.\.\): the sweep follows the training loss"):
        tuner.lr_find(model, val_dataloaders=model.val_dataloader(), num_training=3, update_attr=False)


def test_fast_dev_run_skips_tuning(tmp_path):
    tuner = Tuner(_trainer(tmp_path, fast_dev_run=True))
    model = Regressor(memory_limit=8)
    with pytest.warns(UserWarning, match="lr_find.*skipped.*fast_dev_run=True"):
        assert tuner.lr_find(model) is None
    with pytest.warns(UserWarning, match="scale_batch_size.*skipped"):
        assert tuner.scale_batch_size(model) is None
    assert model.training_steps == 0 and model.hparams.lr == 0.01 and model.hparams.batch_size == 256


def test_multi_process_strategies_are_refused_naming_the_strategy(tmp_path):
    trainer = _trainer(tmp_path, devices=2, strategy="ddp_spawn")
    model = Regressor(memory_limit=8)
    for call in (lambda: Tuner(trainer).lr_find(model), lambda: Tuner(trainer).scale_batch_size(model)):
        with pytest.raises(ConfigurationError, match=r"strategy 'ddp_spawn' \(2 process\(es\).*devices=1"):
            call()
    assert model.training_steps == 0


# ----------------------------------------------------------------------------------------------- scale_batch_size
@pytest.mark.parametrize("mode, expected, tried", [
    ("power", 32, [2, 4, 8, 16, 32, 64]),
    ("binsearch", 38, [2, 4, 8, 16, 32, 64, 48, 40, 44, 42, 41]),  # 40 fits, less the 5% margin
])
def test_scale_batch_size_finds_the_largest_batch_under_a_memory_limit(tmp_path, capsys, mode, expected, tried):
    model = Regressor(batch_size=7, memory_limit=40)
    trainer = _trainer(tmp_path, max_epochs=2)
    weights, callbacks = _weights(model), trainer.callbacks
    assert Tuner(trainer).scale_batch_size(model, mode=mode) == expected
    assert model.hparams.batch_size == expected
    lines = [line for line in capsys.readouterr().out.splitlines() if "trial" in line]
    assert [int(line.split("batch_size=")[1].split()[0]) for line in lines] == tried
    assert _same(_weights(model), weights) and trainer.callbacks is callbacks and trainer.global_step == 0
    assert not [p for p in tmp_path.rglob("*.ckpt")]
    trainer.fit(model)
    assert trainer.global_step == 2 * math.ceil(256 / expected)


class KeepsBatchSizeOnItself(Regressor):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        del self.hparams["batch_size"]
        self.batch_size = 2

    def train_dataloader(self):
        return DataLoader(_data(), batch_size=self.batch_size)

    val_dataloader = predict_dataloader = train_dataloader


class Data(accelkit.DataModule):
    def __init__(self, batch_size: int = 4, samples: int = 256):
        super().__init__()
        self.save_hyperparameters()

    def train_dataloader(self):
        return DataLoader(_data(self.hparams.samples), batch_size=self.hparams.batch_size)

    val_dataloader = predict_dataloader = train_dataloader


def test_the_batch_size_is_found_on_the_module_or_the_datamodule(tmp_path):
    trainer = _trainer(tmp_path, logger=False, enable_checkpointing=False)
    model = KeepsBatchSizeOnItself(memory_limit=20)
    assert Tuner(trainer).scale_batch_size(model, init_val=4) == 16 and model.batch_size == 16

    for pass_it in ("datamodule", "positional"):
        data, model = Data(), Core(memory_limit=12)
        if pass_it == "datamodule":
            found = Tuner(trainer).scale_batch_size(model, datamodule=data, mode="binsearch")
        else:
            found = Tuner(trainer).scale_batch_size(model, data, mode="binsearch")
        assert found == 11 and data.hparams.batch_size == 11  # 12 fits, less the 5% margin
    data = Data(samples=40)
    assert Tuner(trainer).scale_batch_size(Core(), method="predict", dataloaders=data, init_val=3) == 40
    assert data.hparams.batch_size == 40  # growth stops at the number of samples


def test_the_search_halves_below_init_val_and_stops_at_max_trials(tmp_path, capsys):
    trainer = _trainer(tmp_path, logger=False, enable_checkpointing=False)
    model = Regressor(memory_limit=40)
    assert Tuner(trainer).scale_batch_size(model, init_val=200, mode="power") == 25  # 200, 100, 50 fail; 25 fits
    capsys.readouterr()
    assert Tuner(trainer).scale_batch_size(model, max_trials=3) == 8
    assert "max_trials=3 reached" in capsys.readouterr().out
    with pytest.raises(RuntimeError, match="even batch_size=1 runs out of memory"):
        Tuner(trainer).scale_batch_size(Regressor(memory_limit=0), init_val=4)
    assert Tuner(trainer).scale_batch_size(Regressor(), max_val=10) == 10  # 2, 4, 8, 10: the largest to try
    assert Tuner(trainer).scale_batch_size(Regressor(), mode="binsearch", max_val=100, margin=0.5) == 50
    with pytest.warns(UserWarning, match=r"margin=0.2\): the margin applies to mode='binsearch' only"):
        assert Tuner(trainer).scale_batch_size(Regressor(memory_limit=40), margin=0.2) == 32


def test_validate_trials_and_the_sanity_check_of_fit_trials_count(tmp_path):
    class ValidationHungry(Regressor):
        def validation_step(self, batch, batch_idx):
            if batch[0].shape[0] > 24:
                _exhaust_host_memory()

    trainer = _trainer(tmp_path, logger=False, enable_checkpointing=False)
    tuner = Tuner(trainer)
    assert tuner.scale_batch_size(ValidationHungry(), method="validate", mode="binsearch", margin=0) == 24
    assert tuner.scale_batch_size(ValidationHungry(), mode="binsearch", margin=0) == 24  # fit trials validate too


def test_scale_batch_size_refusals_and_errors_that_are_not_about_memory(tmp_path):
    trainer = _trainer(tmp_path, logger=False, enable_checkpointing=False)
    tuner, model = Tuner(trainer), Regressor(batch_size=5)
    with pytest.raises(ConfigurationError, match="train_dataloaders=.*train_dataloader\\(\\)"):
        tuner.scale_batch_size(model, model.train_dataloader())
    with pytest.raises(ConfigurationError, match="dataloaders=.*predict_dataloader"):
        tuner.scale_batch_size(model, method="predict", dataloaders=model.predict_dataloader())
    with pytest.raises(ConfigurationError, match="batch_arg_name='bs'"):
        tuner.scale_batch_size(model, batch_arg_name="bs")
    with pytest.raises(ConfigurationError) as info:
        tuner.scale_batch_size(model, mode="linear", steps_per_trial=0, init_val=-2, margin=1.0)
    assert all(part in str(info.value) for part in ("mode='linear'", "steps_per_trial=0", "init_val=-2", "margin=1.0"))
    with pytest.raises(ConfigurationError, match="init_val=64 is above max_val=32"):
        tuner.scale_batch_size(model, init_val=64, max_val=32)
    with pytest.raises(ValueError, match="method='train'"):
        tuner.scale_batch_size(model, method="train")

    class Broken(Regressor):
        def training_step(self, batch, batch_idx):
            if batch[0].shape[0] > 8:
                raise ValueError("not about memory")
            return super().training_step(batch, batch_idx)

    model = Broken(batch_size=5)
    weights = _weights(model)
    with pytest.raises(ValueError, match="not about memory"):
        tuner.scale_batch_size(model)
    assert model.hparams.batch_size == 5 and _same(_weights(model), weights)
    assert trainer.callbacks == [] and trainer.max_steps == -1 and trainer.limits["validate"] is None


# ----------------------------------------------------------------------------------------------- accelerators
def test_out_of_memory_is_the_accelerators_call(tmp_path):
    from accelkit.tuner.batch_size_scaling import is_out_of_memory

    assert accelkit.Accelerator().is_out_of_memory(MemoryError()) is False  # the device-neutral default
    cpu = _trainer(tmp_path).accelerator
    try:
        _exhaust_host_memory()
    except RuntimeError as error:
        allocator = error
    assert cpu.is_out_of_memory(allocator) and cpu.is_out_of_memory(MemoryError())
    assert not cpu.is_out_of_memory(RuntimeError("shape mismatch"))
    try:
        try:
            _exhaust_host_memory()
        except RuntimeError as error:
            raise RuntimeError("loading the batch failed") from error
    except RuntimeError as wrapped:
        assert is_out_of_memory(cpu, wrapped) and not cpu.is_out_of_memory(wrapped)
