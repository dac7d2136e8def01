"""Timer, BasePredictionWriter, OnExceptionCheckpoint, LambdaCallback and the ModelSummary callbacks, driven by
the real Trainer on one CPU process.

The Timer is tested on a clock of our own that advances only inside the Module's steps (one unit per training
batch), so where it stops is a number of steps known in advance, whatever the machine's load.
"""

from __future__ import annotations

import pickle
import re
import sys
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.callbacks import (  # noqa: E402
    BasePredictionWriter,
    LambdaCallback,
    ModelSummary,
    OnExceptionCheckpoint,
    RichModelSummary,
    Timer,
)
from helpers.models import quiet_trainer, regression_data  # noqa: E402

QUIET = dict(enable_model_summary=False, num_sanity_val_steps=0)


# ---------------------------------------------------------------------------------------------------------- Timer
class Clock:
    """Seconds that pass only when a step says so."""

    now = 0.0


class StepClockTimer(Timer):
    """A Timer reading :class:`Clock` instead of ``time.monotonic``."""

    @staticmethod
    def _now() -> float:
        return Clock.now


class Ticking(accelkit.Module):
    """Linear regression on 16 samples in batches of 4; each training batch takes 1 clock second, each
    validation/test/prediction batch ``eval_cost`` seconds."""

    def __init__(self, eval_cost: float = 2.0) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.eval_cost = eval_cost

    def forward(self, x):
        return self.layer(x)

    def training_step(self, batch, batch_idx):
        Clock.now += 1.0
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        Clock.now += self.eval_cost

    def test_step(self, batch, batch_idx):
        Clock.now += self.eval_cost

    def predict_step(self, batch, batch_idx):
        Clock.now += self.eval_cost
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(regression_data(16), batch_size=4)

    def val_dataloader(self):
        return DataLoader(regression_data(8, seed=1), batch_size=4)

    test_dataloader = val_dataloader
    predict_dataloader = val_dataloader


@pytest.fixture(autouse=False)
def clock() -> type[Clock]:
    Clock.now = 0.0
    return Clock


@pytest.mark.parametrize("duration", ["00:00:01:30", timedelta(minutes=1, seconds=30), {"minutes": 1, "seconds": 30}])
def test_timer_accepts_lightnings_duration_forms(duration: Any) -> None:
    assert Timer(duration).duration == 90.0
    assert Timer(None).duration is None and Timer(None).time_remaining() is None


@pytest.mark.parametrize("bad", ["1:30", "00:00:01:xx", {"hourz": 1}, 90, timedelta(seconds=-1)])
def test_timer_refuses_bad_durations_naming_them(bad: Any) -> None:
    with pytest.raises(accelkit.ConfigurationError, match=r"Timer\(duration="):
        Timer(bad)


def test_timer_refuses_an_unknown_interval_or_stage() -> None:
    with pytest.raises(accelkit.ConfigurationError, match=r"interval='batch'.*'step'.*'epoch'"):
        Timer("00:00:00:05", interval="batch")
    with pytest.raises(ValueError, match=r"unknown stage 'training'.*'train', 'validate', 'test', 'predict'"):
        Timer().time_elapsed("training")


def test_timer_stops_fit_after_the_batch_that_reaches_the_duration(tmp_path, clock, capsys) -> None:
    timer = StepClockTimer(duration="00:00:00:05")
    trainer = quiet_trainer(tmp_path, max_epochs=3, callbacks=[timer], **QUIET)
    trainer.fit(Ticking(eval_cost=0.0))
    # 1 clock second per batch: after batch 5 the elapsed time is 5 s = the duration, so no 6th batch runs (the
    # stop ends the second epoch after its first batch)
    assert trainer.global_step == 5 and trainer.current_epoch == 2
    assert timer.time_elapsed("train") == 5.0 and timer.time_remaining() == 0.0
    assert "time limit reached" in capsys.readouterr().out


@pytest.mark.slow
def test_timer_without_max_epochs_is_not_capped_at_1000_epochs(tmp_path, clock) -> None:
    """A Timer and no ``max_epochs``: as Lightning's, the fit has no epoch limit (``max_epochs`` reads ``-1``) and
    the Timer stops it. Before, accelkit set ``max_epochs=1000`` and stopped there, one batch short of the duration."""
    timer = StepClockTimer(duration="00:00:16:41", verbose=False)  # 1001 clock seconds: one batch per epoch
    trainer = quiet_trainer(tmp_path, callbacks=[timer], limit_train_batches=1, limit_val_batches=0, **QUIET)
    assert trainer.max_epochs is None  # decided by the fit, as in Lightning
    trainer.fit(Ticking(eval_cost=0.0))
    assert trainer.max_epochs == -1
    assert trainer.global_step == 1001 and trainer.current_epoch == 1001
    assert timer.time_remaining() == 0.0


def test_timer_with_interval_epoch_stops_at_an_epoch_end(tmp_path, clock) -> None:
    timer = StepClockTimer(duration="00:00:00:05", interval="epoch", verbose=False)
    trainer = quiet_trainer(tmp_path, max_epochs=5, callbacks=[timer], **QUIET)
    trainer.fit(Ticking(eval_cost=0.0))
    # 4 batches per epoch: 4 s after the first epoch (< 5), 8 s after the second
    assert trainer.global_step == 8 and trainer.current_epoch == 2


def test_timer_times_every_stage(tmp_path, clock) -> None:
    timer = StepClockTimer(verbose=False)
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[timer], **QUIET)
    model = Ticking(eval_cost=2.0)
    trainer.fit(model)
    assert timer.time_elapsed("train") == 4.0 + 4.0  # 4 training batches and the validation inside fit
    assert timer.time_elapsed("validate") == 4.0  # 2 validation batches of 2 s
    assert timer.start_time("test") is None and timer.time_elapsed("test") == 0.0
    trainer.test(model, verbose=False)
    trainer.predict(model)
    assert timer.time_elapsed("test") == 4.0 and timer.time_elapsed("predict") == 4.0
    assert timer.end_time("predict") - timer.start_time("predict") == 4.0
    assert timer.state_dict() == {"time_elapsed": {"train": 8.0, "validate": 4.0, "test": 4.0, "predict": 4.0}}


def test_timer_elapsed_time_survives_a_resume(tmp_path, clock) -> None:
    first = StepClockTimer(verbose=False)
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[first], enable_checkpointing=True, **QUIET)
    trainer.fit(Ticking(eval_cost=0.0))
    checkpoint = trainer.checkpoint_callback.best_model_path  # the default callback's latest file
    assert torch.load(checkpoint, weights_only=True)["callbacks"][first.state_key]["time_elapsed"]["train"] == 4.0

    # 4 s were spent before: a 6 s budget leaves 2 batches
    second = StepClockTimer(duration="00:00:00:06", verbose=False)
    resumed = quiet_trainer(tmp_path, max_epochs=5, callbacks=[second], **QUIET)
    resumed.fit(Ticking(eval_cost=0.0), ckpt_path=checkpoint)
    assert resumed.global_step == 6 and second.time_elapsed() == 6.0

    # a budget already spent: fit stops before its first batch
    spent = StepClockTimer(duration="00:00:00:03", verbose=False)
    again = quiet_trainer(tmp_path, max_epochs=5, callbacks=[spent], **QUIET)
    again.fit(Ticking(eval_cost=0.0), ckpt_path=checkpoint)
    assert again.global_step == 4


# ----------------------------------------------------------------------------------------------- prediction writer
class Numbers(Dataset):
    """Sample ``i`` is the 1-element tensor ``[i]``: a prediction says which sample it came from."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([float(index)])


class Echo(accelkit.Module):
    """``predict_step`` returns the batch (the samples' own indices) times 10."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(1, 1)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return batch * 10


class Recorder(BasePredictionWriter):
    def __init__(self, write_interval: str) -> None:
        super().__init__(write_interval)
        self.batches: list[tuple] = []
        self.epochs: list[tuple] = []

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append((prediction.clone(), list(batch_indices), batch_idx, dataloader_idx))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.epochs.append((predictions, batch_indices))


def _check_pairs(prediction: torch.Tensor, indices: list[int]) -> None:
    assert prediction.flatten().tolist() == [10.0 * i for i in indices]


def test_writer_gets_each_batch_with_its_dataset_indices(tmp_path) -> None:
    writer = Recorder("batch")
    trainer = quiet_trainer(tmp_path, callbacks=[writer], **QUIET)
    torch.manual_seed(1)
    loader = DataLoader(Numbers(10), batch_size=3, shuffle=True)
    assert trainer.predict(Echo(), loader, return_predictions=False) is None
    assert len(writer.batches) == 4 and not writer.epochs
    for prediction, indices, _batch_idx, dataloader_idx in writer.batches:
        _check_pairs(prediction, indices)
        assert dataloader_idx == 0
    assert [b[2] for b in writer.batches] == [0, 1, 2, 3]
    seen = [i for b in writer.batches for i in b[1]]
    assert sorted(seen) == list(range(10)) and seen != list(range(10))  # shuffled, all there once
    assert trainer.predict_loop.predictions == []  # nothing kept: no epoch writer, return_predictions=False


def test_epoch_writer_gets_every_prediction_with_return_predictions_false(tmp_path) -> None:
    writer = Recorder("epoch")
    trainer = quiet_trainer(tmp_path, callbacks=[writer], **QUIET)
    assert trainer.predict(Echo(), DataLoader(Numbers(7), batch_size=3), return_predictions=False) is None
    assert not writer.batches and len(writer.epochs) == 1
    predictions, batch_indices = writer.epochs[0]
    assert batch_indices == [[[0, 1, 2], [3, 4, 5], [6]]]  # per loader, per batch
    assert len(predictions) == 3
    for prediction, indices in zip(predictions, batch_indices[0], strict=True):
        _check_pairs(prediction, indices)
    # kept for the writer only, dropped when the run ends (Lightning's on_predict_end)
    assert trainer.predict_loop.predictions == [] and trainer.predict_loop.epoch_batch_indices == []


def test_batch_and_epoch_writer_with_several_loaders(tmp_path) -> None:
    writer = Recorder("batch_and_epoch")
    trainer = quiet_trainer(tmp_path, callbacks=[writer], **QUIET)
    loaders = [DataLoader(Numbers(4), batch_size=2), DataLoader(Numbers(3), batch_size=2)]
    returned = trainer.predict(Echo(), loaders)
    assert [(b[2], b[3]) for b in writer.batches] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    predictions, batch_indices = writer.epochs[0]
    assert batch_indices == [[[0, 1], [2, 3]], [[0, 1], [2]]]
    assert len(predictions) == 2 and [len(p) for p in predictions] == [2, 2]  # one list per loader
    assert len(returned) == 2 and torch.equal(returned[1][1], torch.tensor([[20.0]]))


def test_writer_on_an_iterable_dataset_warns_that_indices_are_unknown(tmp_path) -> None:
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(torch.tensor([[float(i)]]) for i in range(3))

    writer = Recorder("batch")
    trainer = quiet_trainer(tmp_path, callbacks=[writer], **QUIET)
    with pytest.warns(UserWarning, match="batch_indices"):
        trainer.predict(Echo(), DataLoader(Stream(), batch_size=None), return_predictions=False)
    assert [b[1] for b in writer.batches] == [[], [], []]


def test_writer_refuses_an_unknown_interval_and_says_what_to_override(tmp_path) -> None:
    with pytest.raises(accelkit.ConfigurationError,
                       match=r"write_interval='step'.*'batch', 'epoch', 'batch_and_epoch'"):
        BasePredictionWriter("step")
    trainer = quiet_trainer(tmp_path, callbacks=[BasePredictionWriter("epoch")], **QUIET)
    with pytest.raises(NotImplementedError, match="must override write_on_epoch_end"):
        trainer.predict(Echo(), DataLoader(Numbers(2), batch_size=2))


def test_return_predictions_is_honoured_without_a_writer(tmp_path) -> None:
    trainer = quiet_trainer(tmp_path, **QUIET)
    loader = DataLoader(Numbers(4), batch_size=2)
    assert trainer.predict(Echo(), loader, return_predictions=False) is None
    assert trainer.prediction_writer_callbacks == []
    kept = trainer.predict(Echo(), loader)
    assert [p.flatten().tolist() for p in kept] == [[0.0, 10.0], [20.0, 30.0]]
    assert trainer.predict_loop.return_predictions is True


# ------------------------------------------------------------------------------------------ OnExceptionCheckpoint
class FailsAt(accelkit.Module):
    """Linear regression (4 batches per epoch) whose ``training_step`` raises at global step ``fail_at``."""

    def __init__(self, fail_at: int | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.fail_at = fail_at

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_at:
            raise RuntimeError(f"deliberate failure at step {self.global_step}")
        x, y = batch
        return F.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(regression_data(16), batch_size=4)


def test_on_exception_checkpoint_saves_the_failed_state_and_last_resumes_it(tmp_path) -> None:
    callback = OnExceptionCheckpoint(tmp_path / "crash")
    assert callback.ckpt_path == str((tmp_path / "crash" / "on_exception.ckpt").resolve())
    trainer = quiet_trainer(tmp_path, max_epochs=2, callbacks=[callback], enable_checkpointing=True, **QUIET)
    assert trainer.checkpoint_callbacks == [callback]  # as in Lightning: no default ModelCheckpoint beside it
    model = FailsAt(fail_at=6)
    with pytest.raises(RuntimeError, match="deliberate failure at step 6"):
        trainer.fit(model)
    saved = torch.load(callback.ckpt_path, weights_only=True)
    assert saved["global_step"] == 6 and saved["epoch"] == 1
    assert torch.equal(saved["state_dict"]["layer.weight"], model.layer.weight.detach())

    model.fail_at = None
    resumed = quiet_trainer(tmp_path, max_epochs=2, callbacks=[OnExceptionCheckpoint(tmp_path / "crash")],
                            enable_checkpointing=True, **QUIET)
    resumed.fit(model, ckpt_path="last")  # "last" finds the on-exception checkpoint
    assert resumed.ckpt_path == callback.ckpt_path
    assert resumed.global_step == 8  # continued from step 6
    assert not Path(callback.ckpt_path).exists()  # a completed fit removes the stale checkpoint


def test_on_exception_checkpoint_that_cannot_write_warns_and_the_run_error_is_raised(tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    trainer = quiet_trainer(tmp_path, callbacks=[OnExceptionCheckpoint(blocker)], enable_checkpointing=True,
                            **QUIET)
    with pytest.warns(UserWarning, match="could not write .*after the run raised RuntimeError"):
        with pytest.raises(RuntimeError, match="deliberate failure at step 1"):
            trainer.fit(FailsAt(fail_at=1))


def test_on_exception_checkpoint_is_a_checkpoint_callback_that_enable_checkpointing_false_refuses(tmp_path):
    with pytest.raises(accelkit.ConfigurationError, match=r"enable_checkpointing=False.*\(OnExceptionCheckpoint\)"):
        quiet_trainer(tmp_path, callbacks=[OnExceptionCheckpoint(tmp_path)], enable_checkpointing=False)


def test_on_exception_checkpoint_refuses_a_bad_filename(tmp_path) -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        OnExceptionCheckpoint(tmp_path, filename="")
    with pytest.raises(ValueError, match="without the .ckpt extension"):
        OnExceptionCheckpoint(tmp_path, filename="crash.ckpt")
    for name in ("../crash", "/tmp/crash", "sub/../../crash"):  # issue 36: nothing written or removed outside
        with pytest.raises(ValueError, match=re.escape(f"OnExceptionCheckpoint(filename={name!r}): the name leaves "
                                                       "dirpath")):
            OnExceptionCheckpoint(tmp_path, filename=name)


def test_on_exception_checkpoint_removes_only_a_checkpoint_after_a_completed_fit(tmp_path) -> None:
    """A folder of the user's at the checkpoint's path is no checkpoint: a completed fit keeps it, with a warning
    naming it (it was removed with ``shutil.rmtree``)."""
    callback = OnExceptionCheckpoint(tmp_path / "crash")
    Path(callback.ckpt_path).mkdir(parents=True)
    (Path(callback.ckpt_path) / "precious.txt").write_text("keep me")
    trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=[callback], enable_checkpointing=True, **QUIET)
    with pytest.warns(UserWarning, match=re.escape(f"OnExceptionCheckpoint did not remove {callback.ckpt_path!r} "
                                                   "after the completed fit: it is a folder but not a sharded "
                                                   "checkpoint")):
        trainer.fit(FailsAt(fail_at=None))
    assert (Path(callback.ckpt_path) / "precious.txt").read_text() == "keep me"


# ----------------------------------------------------------------------------------------------------- LambdaCallback
EVENTS: list[tuple] = []


def on_train_epoch_end(trainer, pl_module):
    EVENTS.append(("on_train_epoch_end", trainer.current_epoch, type(pl_module).__name__))


def on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx):
    EVENTS.append(("on_train_batch_end", batch_idx, float(outputs["loss"].detach()) > 0))


def setup(trainer, pl_module, stage):
    EVENTS.append(("setup", stage))


def test_lambda_callback_calls_each_function_with_its_hook_arguments(tmp_path) -> None:
    EVENTS.clear()
    callback = LambdaCallback(setup=setup, on_train_batch_end=on_train_batch_end,
                              on_train_epoch_end=on_train_epoch_end)
    assert isinstance(callback, (LambdaCallback, accelkit.Callback)) and callback.state_key == "LambdaCallback"
    quiet_trainer(tmp_path, max_epochs=2, callbacks=[callback], **QUIET).fit(FailsAt(fail_at=None))
    assert EVENTS[0] == ("setup", "fit")
    assert [e for e in EVENTS if e[0] == "on_train_epoch_end"] == [("on_train_epoch_end", 0, "FailsAt"),
                                                                 ("on_train_epoch_end", 1, "FailsAt")]
    assert [e[1] for e in EVENTS if e[0] == "on_train_batch_end"] == [0, 1, 2, 3] * 2
    # hooks not given are not overridden, so the Trainer never calls them
    assert "on_train_batch_start" not in vars(type(callback)) and "on_train_batch_end" in vars(type(callback))


def test_lambda_callback_pickles_for_spawned_workers() -> None:
    callback = LambdaCallback(on_train_epoch_end=on_train_epoch_end)
    copy = pickle.loads(pickle.dumps(callback))
    assert type(copy) is type(callback) and copy.hooks == {"on_train_epoch_end": on_train_epoch_end}


def test_lambda_callback_refuses_unknown_hooks_and_non_functions() -> None:
    with pytest.raises(TypeError, match=r"unknown hook name\(s\): 'on_train_epoch_ends' \(did you mean "
                                        r"'on_train_epoch_end'\?\)"):
        LambdaCallback(on_train_epoch_ends=on_train_epoch_end)
    with pytest.raises(TypeError, match="unknown hook name.*'state_dict'"):
        LambdaCallback(state_dict=dict)
    with pytest.raises(TypeError, match="not callable: on_fit_start=3"):
        LambdaCallback(on_fit_start=3)


# ------------------------------------------------------------------------------------------------ ModelSummary
class Nested(accelkit.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        self.head = nn.Linear(3, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.head(self.encoder(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(regression_data(4), batch_size=4)


def _summaries(trainer: accelkit.Trainer) -> list[ModelSummary]:
    return [c for c in trainer.callbacks if isinstance(c, ModelSummary)]


def test_the_default_summary_is_a_callback_that_users_replace_or_remove(tmp_path, capsys) -> None:
    default = quiet_trainer(tmp_path, max_epochs=1)
    assert [type(c) for c in _summaries(default)] == [ModelSummary] and _summaries(default)[0].max_depth == 1
    default.fit(Nested())
    out = capsys.readouterr().out
    assert "encoder" in out and "Sequential" in out and "encoder.0" not in out and out.count("Total params") == 1

    mine = ModelSummary(max_depth=2)
    replaced = quiet_trainer(tmp_path, max_epochs=1, callbacks=[mine])
    assert _summaries(replaced) == [mine]
    replaced.fit(Nested())
    out = capsys.readouterr().out
    assert "encoder.0" in out and "encoder.1" in out and out.count("Total params") == 1

    assert _summaries(quiet_trainer(tmp_path, enable_model_summary=False)) == []
    quiet_trainer(tmp_path, max_epochs=1, callbacks=[ModelSummary(max_depth=0)]).fit(Nested())
    assert "Total params" not in capsys.readouterr().out  # max_depth=0 turns the summary off


def test_a_summary_callback_with_enable_model_summary_false_runs_and_says_so(tmp_path, capsys) -> None:
    with pytest.warns(UserWarning, match="enable_model_summary=False.*ModelSummary"):
        trainer = quiet_trainer(tmp_path, max_epochs=1, enable_model_summary=False, callbacks=[ModelSummary()])
    trainer.fit(Nested())
    assert "Total params" in capsys.readouterr().out


class Collecting(ModelSummary):
    """A subclass that keeps what ``summarize`` receives instead of printing it (Lightning's override point)."""

    received: list[tuple] = []

    @staticmethod
    def summarize(summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                  **summarize_kwargs):
        Collecting.received.append((summary_data, total_parameters, trainable_parameters, model_size,
                                    total_training_modes, summarize_kwargs))


def test_summarize_receives_lightnings_columns_and_totals(tmp_path, capsys) -> None:
    Collecting.received.clear()
    quiet_trainer(tmp_path, max_epochs=1, callbacks=[Collecting(max_depth=-1, note="x")]).fit(Nested())
    assert "Total params" not in capsys.readouterr().out
    (data, total, trainable, size, modes, kwargs), = Collecting.received
    columns = dict(data)
    assert list(columns) == [" ", "Name", "Type", "Params", "Mode"]
    assert columns["Name"] == ["encoder", "encoder.0", "encoder.1", "head"]
    assert columns["Type"] == ["Sequential", "Linear", "ReLU", "Linear"]
    assert columns["Params"] == ["15", "15", "0", "4"] and total == trainable == 19
    assert size == pytest.approx(19 * 4 / 1e6) and modes == {"train": 4, "eval": 0} and kwargs == {"note": "x"}


def test_model_summary_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="max_depth=-2"):
        ModelSummary(max_depth=-2)
    with pytest.raises(TypeError, match="header_style.*takes no summarize arguments"):
        ModelSummary(header_style="bold")
    with pytest.raises(TypeError, match="unknown argument.*colour.*header_style"):
        RichModelSummary(colour="red")


def test_rich_model_summary_draws_a_table(tmp_path, capsys) -> None:
    pytest.importorskip("rich")
    quiet_trainer(tmp_path, max_epochs=1, callbacks=[RichModelSummary(max_depth=2)]).fit(Nested())
    out = capsys.readouterr().out
    assert "encoder.0" in out and "Sequential" in out and "Total params" in out
    assert "┃" in out or "|" in out  # drawn by rich, not the plain-text table's rules


def test_rich_model_summary_without_rich_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # what `import rich` meets where the package is missing
    with pytest.raises(ImportError, match="pip install rich"):
        RichModelSummary()


def test_no_new_callback_warns_by_itself(tmp_path) -> None:
    """Constructing and running the new callbacks in a plain fit emits no warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        callbacks = [Timer(), LambdaCallback(on_fit_end=on_train_epoch_end), OnExceptionCheckpoint(tmp_path)]
        trainer = quiet_trainer(tmp_path, max_epochs=1, callbacks=callbacks, enable_checkpointing=True, **QUIET)
        trainer.fit(FailsAt(fail_at=None))
    assert trainer.global_step == 4
