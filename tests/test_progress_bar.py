"""The progress bar as a callback: ``TQDMProgressBar`` (the Trainer's default) and ``RichProgressBar``, configured
and subclassed as in Lightning, and the property that a bar never reads the device itself."""

from __future__ import annotations

import io
import pickle
import sys
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

import accelkit
from accelkit.callbacks import ModelSummary, ProgressBar, RichModelSummary, RichProgressBar, TQDMProgressBar
from accelkit.callbacks.progress import Tqdm, get_standard_metrics
from accelkit.errors import ConfigurationError
from helpers.models import PredictsInputs

BATCHES = 8


class Model(PredictsInputs, accelkit.Module):
    """Logs its loss per step (on the bar) and a per-epoch value; validation and test log too."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self(batch[0]).pow(2).mean()
        self.log("train_loss", loss, prog_bar=True)
        self.log("seen", float(batch_idx), prog_bar=True, on_step=False, on_epoch=True, reduce_fx="max")
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self(batch[0]).pow(2).mean(), prog_bar=True)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("test_loss", self(batch[0]).pow(2).mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Stream(IterableDataset):
    """Batches without a length."""

    def __iter__(self):
        generator = torch.Generator().manual_seed(0)
        for _ in range(BATCHES):
            yield (torch.randn(4, generator=generator),)


def data(n: int = BATCHES) -> DataLoader:
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=torch.Generator().manual_seed(0))), batch_size=1)


@pytest.fixture(autouse=True)
def drawn_bars(monkeypatch):
    """The tests of this file look at the drawn bars, which pytest's captured (not a terminal) standard output
    would otherwise get as plain lines; the plain lines' own tests set the variable themselves."""
    monkeypatch.setenv("ACCELKIT_PROGRESS", "bar")


def trainer(tmp_path, **kwargs: Any) -> accelkit.Trainer:
    settings = dict(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                    enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path)
    return accelkit.Trainer(**{**settings, **kwargs})


class RecordingBar(TQDMProgressBar):
    """Draws into a string buffer and records where the training bar stands after each batch."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream = io.StringIO()
        self.positions: list[int] = []

    def init_train_tqdm(self) -> Tqdm:
        return Tqdm(desc=self.train_description, disable=self.is_disabled, leave=True, file=self.stream,
                    bar_format=self.BAR_FORMAT)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self.positions.append(self.train_progress_bar.n)


# ---------------------------------------------------------------------------------------------- the Trainer's bar
def test_the_trainer_adds_a_tqdm_bar_unless_the_bar_is_off(tmp_path):
    default = trainer(tmp_path)
    assert type(default.progress_bar_callback) is TQDMProgressBar
    assert default.progress_bar_callback in default.callbacks
    assert trainer(tmp_path, enable_progress_bar=False).progress_bar_callback is None
    mine = TQDMProgressBar(refresh_rate=5)
    given = trainer(tmp_path, callbacks=[mine])
    assert given.progress_bar_callback is mine
    assert [c for c in given.callbacks if isinstance(c, ProgressBar)] == [mine]  # no second, default bar


def test_a_bar_given_while_the_bar_is_off_or_two_bars_are_refused(tmp_path):
    with pytest.raises(ConfigurationError, match="enable_progress_bar=False .* TQDMProgressBar is among the callbacks"):
        trainer(tmp_path, enable_progress_bar=False, callbacks=[TQDMProgressBar()])
    with pytest.raises(ConfigurationError, match="RichProgressBar is among the callbacks"):
        accelkit.Trainer(accelerator="cpu", barebones=True, callbacks=[RichProgressBar()])
    with pytest.raises(ConfigurationError, match="2 progress bars \\(TQDMProgressBar, RichProgressBar\\)"):
        trainer(tmp_path, callbacks=[TQDMProgressBar(), RichProgressBar()])


def test_arguments_are_kept_and_bad_ones_refused():
    bar = TQDMProgressBar(refresh_rate=10, process_position=1, leave=True)
    assert (bar.refresh_rate, bar.process_position, bar.is_enabled) == (10, 1, True)
    assert TQDMProgressBar(refresh_rate=0).is_disabled
    bar.disable()
    assert bar.is_disabled and not bar.is_enabled
    bar.enable()
    assert bar.is_enabled
    with pytest.raises(ValueError, match="refresh_rate=-1.*int >= 0"):
        TQDMProgressBar(refresh_rate=-1)
    with pytest.raises(ValueError, match="process_position='top'"):
        TQDMProgressBar(process_position="top")
    with pytest.raises(TypeError, match="_train_progress_bar. reference has not been set yet"):
        TQDMProgressBar().train_progress_bar


# ---------------------------------------------------------------------------------------------- what it shows
def test_the_bar_counts_the_batches_and_shows_the_logged_values(tmp_path, capsys):
    fit = trainer(tmp_path, max_epochs=2)
    fit.fit(Model(), data(), data(4))
    bar = fit.progress_bar_callback
    train = bar.train_progress_bar
    assert (train.n, train.total) == (BATCHES, BATCHES)
    assert train.desc.startswith("Epoch 1")
    for name in ("train_loss=", "seen=7.000", "val_loss="):  # a step value, an epoch value, validation's
        assert name in train.postfix, train.postfix
    assert (bar.val_progress_bar.n, bar.val_progress_bar.total) == (4, 4)
    out = capsys.readouterr().out  # standard output, as Lightning's bar
    assert f"{BATCHES}/{BATCHES}" in out and "Epoch 1" in out and "Validation" in out


def test_refresh_rate_moves_the_bar_every_n_batches_and_at_the_end(tmp_path):
    bar = RecordingBar(refresh_rate=3)
    trainer(tmp_path, callbacks=[bar]).fit(Model(), data())
    assert bar.positions == [0, 0, 3, 3, 3, 6, 6, 8]
    assert f"{BATCHES}/{BATCHES}" in bar.stream.getvalue()
    every = RecordingBar()
    trainer(tmp_path, callbacks=[every]).fit(Model(), data())
    assert every.positions == list(range(1, BATCHES + 1))


def test_a_disabled_bar_draws_nothing(tmp_path, capsys):
    trainer(tmp_path, callbacks=[TQDMProgressBar(refresh_rate=0)]).fit(Model(), data())
    trainer(tmp_path, enable_progress_bar=False).fit(Model(), data())
    captured = capsys.readouterr()
    assert "Epoch" not in captured.out + captured.err


def test_a_subclass_changes_what_is_shown_and_the_bars(tmp_path, capsys):
    class LitProgressBar(TQDMProgressBar):
        def get_metrics(self, trainer, pl_module):
            items = super().get_metrics(trainer, pl_module)
            items.pop("v_num", None)
            items["lr"] = trainer.optimizers[0].param_groups[0]["lr"]
            return items

        def init_validation_tqdm(self):
            bar = super().init_validation_tqdm()
            bar.set_description("running validation ...")
            return bar

    bar = LitProgressBar()
    fit = trainer(tmp_path, callbacks=[bar], logger=True)
    fit.fit(Model(), data(), data(4))
    postfix = bar.train_progress_bar.postfix
    assert "lr=0.010" in postfix and "train_loss=" in postfix and "v_num" not in postfix
    assert "running validation ..." in capsys.readouterr().out


def test_the_loggers_version_is_shown_as_v_num(tmp_path):
    fit = trainer(tmp_path, logger=True)
    fit.fit(Model(), data())
    assert get_standard_metrics(fit) == {"v_num": fit.logger.version}
    assert f"v_num={fit.logger.version}" in fit.progress_bar_callback.train_progress_bar.postfix
    assert get_standard_metrics(trainer(tmp_path)) == {}  # no logger, no version


def test_a_loader_without_a_length_shows_the_count_and_the_epoch_metrics(tmp_path, capsys):
    fit = trainer(tmp_path)
    fit.fit(Model(), DataLoader(Stream(), batch_size=None))
    train = fit.progress_bar_callback.train_progress_bar
    assert train.total is None and train.n == BATCHES
    assert "seen=7.000" in train.postfix and "train_loss=" in train.postfix
    assert f"{BATCHES}/?" in capsys.readouterr().out


def test_test_and_predict_bars_count_each_loader(tmp_path, capsys):
    fit = trainer(tmp_path)
    model = Model()
    fit.test(model, [data(3), data(5)])
    bar = fit.progress_bar_callback
    assert fit.num_test_batches == [3, 5]
    assert (bar.test_progress_bar.n, bar.test_progress_bar.total) == (5, 5)
    fit.predict(model, data(6))
    assert fit.num_predict_batches == [6]
    assert (bar.predict_progress_bar.n, bar.predict_progress_bar.total) == (6, 6)
    out = capsys.readouterr().out
    assert "Testing DataLoader 0" in out and "Testing DataLoader 1" in out and "Predicting" in out


def test_the_sanity_check_has_its_own_bar_and_count(tmp_path, capsys):
    fit = trainer(tmp_path, num_sanity_val_steps=2)
    fit.fit(Model(), data(), data(4))
    assert fit.num_sanity_val_batches == [2]
    assert "Sanity Checking" in capsys.readouterr().out


def test_a_failing_run_closes_its_bars_so_the_error_starts_a_line(tmp_path, capsys):
    class Fails(Model):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            if batch_idx == 3:
                raise RuntimeError("step 3 failed")
            return super().training_step(batch, batch_idx)

    fit = trainer(tmp_path)
    with pytest.raises(RuntimeError, match="step 3 failed"):
        fit.fit(Fails(), data())
    assert capsys.readouterr().out.endswith("\n")
    assert fit.progress_bar_callback.train_progress_bar.disable  # closed


def test_numbers_keep_their_width():
    assert [Tqdm.format_num(v) for v in (0.5, 12.0, 3, "7", 1e-05)] == ["0.500", "12.00", "3", "7.000", "1e-5"]


def test_a_bar_that_ran_pickles_without_its_tqdm_objects(tmp_path):
    fit = trainer(tmp_path)
    fit.fit(Model(), data())
    copy = pickle.loads(pickle.dumps(fit.progress_bar_callback))
    assert copy.refresh_rate == 1 and copy._train_progress_bar is None


# ---------------------------------------------------------------------------------------------- no device reads
class CountingTensor(torch.Tensor):
    """A tensor that counts the times its value is read on the host (``float()``, ``item()``, ``.cpu()``)."""

    reads = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.__float__, torch.Tensor.item, torch.Tensor.cpu, torch.Tensor.tolist):
            CountingTensor.reads += 1
        return super().__torch_function__(func, types, args, kwargs or {})


class CountedModel(Model):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self(batch[0]).pow(2).mean()
        self.log("train_loss", loss.detach().as_subclass(CountingTensor), prog_bar=True)
        return loss


class CountingBar(TQDMProgressBar):
    """Counts the times the bar asks for its values."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def get_metrics(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        self.asked += 1
        return super().get_metrics(trainer, pl_module)


@pytest.mark.parametrize("log_every", [1, 4])
def test_the_bar_reads_the_logged_values_only_when_it_draws(tmp_path, log_every):
    """``trainer.progress_bar_metrics`` is computed when read, as in Lightning: the bar reads a ``prog_bar`` value
    from the device when it asks for its values (a redraw: at most ten a second), once each, and nothing else does
    during the steps without a logger, whatever ``log_every_n_steps``."""
    reads, bar = [], CountingBar()
    for bars in ([], [bar]):
        CountingTensor.reads = 0
        trainer(tmp_path, enable_progress_bar=bool(bars), callbacks=bars, log_every_n_steps=log_every,
                max_epochs=2).fit(CountedModel(), data(16))
        reads.append(CountingTensor.reads)
    # none during the steps: each epoch's end publishes the last step value for the bar (2 reads), the run's end
    # moves callback_metrics and logged_metrics to the CPU (2) and so does the worker's result (2)
    assert reads[0] == 6, reads
    assert 0 < reads[1] - reads[0] <= bar.asked, (reads, bar.asked)


# ---------------------------------------------------------------------------------------------- rich
def test_rich_bar_renders_the_run_and_brings_the_rich_summary(tmp_path):
    buffer = io.StringIO()
    bar = RichProgressBar(console_kwargs={"file": buffer, "width": 140})
    fit = accelkit.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False,
                           num_sanity_val_steps=0, default_root_dir=tmp_path, callbacks=[bar])
    summaries = [c for c in fit.callbacks if isinstance(c, ModelSummary)]
    assert [type(c) for c in summaries] == [RichModelSummary]  # Lightning's default with a rich bar
    assert fit.progress_bar_callback is bar
    model = Model()
    fit.fit(model, data(), data(4))
    fit.test(model, data(3))
    text = buffer.getvalue()
    assert "Epoch 1" in text and f"{BATCHES}/{BATCHES}" in text, text
    assert "train_loss:" in text and "val_loss:" in text and "seen: 7.000" in text, text
    assert "Testing" in text and "3/3" in text, text
    assert bar.progress is None  # stopped at the end of each loop


def test_rich_bar_without_rich_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)  # as if rich were not installed
    with pytest.raises(ImportError, match="pip install rich"):
        RichProgressBar()


def test_rich_bar_refuses_a_bad_refresh_rate():
    with pytest.raises(ValueError, match="refresh_rate=1.5"):
        RichProgressBar(refresh_rate=1.5)


# ---------------------------------------------------------------------------------------------- files and pipes
PIPED_FIT = """
import warnings
import torch
from torch.utils.data import DataLoader, TensorDataset
import accelkit

class Net(accelkit.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def forward(self, x):
        return self.layer(x)
    def training_step(self, batch, batch_idx):
        loss = self.layer(batch[0]).pow(2).mean()
        self.log("train_loss", loss, prog_bar=True)
        if batch_idx == 2:
            warnings.warn("a warning from the user's training_step")
        return loss
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.layer(batch[0]).pow(2).mean(), prog_bar=True)
    def predict_step(self, batch, batch_idx):
        return self(batch[0])  # a TensorDataset's batch is a list; the default passes it whole, as Lightning's
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

data = DataLoader(TensorDataset(torch.randn(16, 4, generator=torch.Generator().manual_seed(0))), batch_size=2)
trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=False, enable_checkpointing=False,
                           enable_model_summary=False)
trainer.fit(Net(), data, data)
trainer.predict(trainer.lightning_module, data)
"""


#: where PIPED_FIT warns
WARNING_LINE = next(i for i, line in enumerate(PIPED_FIT.splitlines(), 1) if "warnings.warn(" in line)


def _run_fit(tmp_path, env_extra: dict[str, str], use_pty: bool = False) -> tuple[bytes, bytes]:
    """The piped fit in a fresh interpreter: its standard output and error, read through a pipe (or a pty)."""
    import os
    import subprocess

    from helpers.guards import child_env

    script = tmp_path / "piped_fit.py"
    script.write_text(PIPED_FIT)
    env = {**child_env(), **env_extra}
    if not use_pty:
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout, proc.stderr
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # 24 rows, 120 columns
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, stdout=follower, stderr=follower)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=300) == 0, out.decode(errors="replace")
    os.close(leader)
    return out, b""


@pytest.mark.slow
def test_piped_output_is_one_plain_line_per_epoch(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELKIT_PROGRESS")
    out, err = _run_fit(tmp_path, {})
    assert b"\r" not in out and b"\x1b" not in out, out
    lines = out.decode().splitlines()
    epochs = [line for line in lines if line.startswith("Epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["Epoch 0", "Epoch 1", "Epoch 2"], lines
    assert all(" 8/8 batches, " in line and "train_loss=" in line and "val_loss=" in line for line in epochs), lines
    assert "Predicting: 8 batches" in lines
    assert any(line.startswith("accelkit: fit stopped: max_epochs=3 reached") for line in lines), lines
    # the user's warning goes to standard error, naming the user's line, once
    assert err.decode().count("UserWarning: a warning from the user's training_step") == 1, err
    assert f"piped_fit.py:{WARNING_LINE}: UserWarning" in err.decode(), err


def test_a_bad_progress_choice_names_the_ones_that_work(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_PROGRESS", "fancy")
    with pytest.raises(ConfigurationError, match="ACCELKIT_PROGRESS='fancy' is not understood; use 'bar'"):
        trainer(tmp_path).fit(Model(), data())


@pytest.mark.slow
def test_in_a_terminal_a_warning_gets_its_own_line_above_the_bar(tmp_path, monkeypatch):
    import re

    monkeypatch.delenv("ACCELKIT_PROGRESS")
    out, _ = _run_fit(tmp_path, {}, use_pty=True)
    text = out.decode(errors="replace")
    assert "\r" in text and "Epoch 0" in text  # drawn bars, in a terminal
    at = text.index("UserWarning: a warning from the user's training_step")
    start = text.rfind("\r", 0, at)  # where the cursor last went back to the line's start
    ours = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text[start + 1:at]).strip()
    erased = text[text.rfind("\r", 0, start) + 1:start]  # what was written over the bar before that
    # the warning starts its own line (its location, the user's line, first); the bar's line was blanked first
    assert ours.endswith(f"piped_fit.py:{WARNING_LINE}:") and "Epoch" not in ours and "it/s" not in ours, repr(ours)
    assert erased.strip() == "", repr(erased)
