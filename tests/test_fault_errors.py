"""Errors that explain (issue 10): each bad argument, loader, environment value, checkpoint file and failed write
is reproduced for real and its message must name the value (or file) and what would work."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit
from accelkit.checkpoint import files as checkpoint
from accelkit.checkpoint.files import CheckpointError, UnsafeCheckpointError
from accelkit.errors import ConfigurationError
from helpers.guards import PYTHON, TESTS, child_env
from helpers.models import RegressionModule, regression_data


def trainer(root: Path | None = None, **kwargs: Any) -> accelkit.Trainer:
    kwargs.setdefault("max_epochs", 1)
    return accelkit.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                            default_root_dir=root, **kwargs)


def loader() -> DataLoader:
    return DataLoader(regression_data(), batch_size=8)


# ---------------------------------------------------------------------------------------------- Trainer arguments
@pytest.mark.parametrize("plugins, shown", [(5, "plugins item 5 (int)"), ([None], "plugins item None (NoneType)"),
                                            ([3.5], "plugins item 3.5 (float)")])
def test_a_plugins_value_that_is_no_plugin_is_named(plugins, shown):
    with pytest.raises(ConfigurationError) as info:
        trainer(plugins=plugins)
    assert shown in str(info.value) and "'no:NAME'" in str(info.value) and "ACCELKIT_API" not in str(info.value)


def test_a_strategy_class_in_plugins_asks_for_an_instance():
    from accelkit.strategies.single_device import SingleDeviceStrategy

    with pytest.raises(ConfigurationError, match=r"SingleDeviceStrategy is a class; pass an instance"):
        trainer(plugins=[SingleDeviceStrategy])


@pytest.mark.parametrize("devices", [2**63, 10**7, str(10**7)])
def test_an_absurd_device_count_is_refused_before_anything_starts(devices):
    with pytest.raises(ConfigurationError) as info:
        trainer(devices=devices)
    message = str(info.value)
    assert f"devices={devices!r}" in message and f"'cpu' has {os.cpu_count()} device(s) here" in message
    assert "devices='auto'" in message


def test_a_large_but_sane_cpu_device_count_is_still_allowed():
    with pytest.warns(UserWarning, match="compete for the cores"):
        assert trainer(devices=64).strategy.world_size == 64  # processes are only started by fit()


@pytest.mark.parametrize("argument, value, words", [
    ("check_val_every_n_epoch", 0, "check_val_every_n_epoch=0 must be an int >= 1"),
    ("max_steps", -5, "max_steps=-5 must be an int >= 0, or -1"),
])
def test_range_checked_arguments(argument, value, words):
    with pytest.raises(ConfigurationError, match=words):
        trainer(**{argument: value})


def test_fit_refuses_a_plain_torch_module():
    with pytest.raises(TypeError, match="needs an accelkit.Module, got Linear"):
        trainer(enable_checkpointing=False).fit(torch.nn.Linear(4, 1), loader())


def test_a_malformed_seed_variable_is_named(monkeypatch):
    monkeypatch.setenv("ACCELKIT_SEED", "abc")
    with pytest.raises(ConfigurationError, match="ACCELKIT_SEED='abc' is not an integer"):
        trainer(enable_checkpointing=False)


# ---------------------------------------------------------------------------------------------- loaders
@pytest.mark.parametrize("call, words", [
    (lambda t, m: t.fit(m, 5), "fit(): train_dataloaders is a int (5), which is not iterable"),
    (lambda t, m: t.fit(m, regression_data()), "train_dataloaders is a TensorDataset (a map-style Dataset"),
    (lambda t, m: t.fit(m, loader(), [loader(), 7]), "val_dataloaders[1] is a int (7)"),
    (lambda t, m: t.validate(m, "abc"), "validate(): dataloaders is 'abc', not a loader"),
    (lambda t, m: t.predict(m, {"a": loader(), "b": object()}), "dataloaders['b'] is a object"),
])
def test_a_loader_of_the_wrong_kind_is_refused_before_the_run(tmp_path, call, words):
    module = RegressionModule()
    with pytest.raises(TypeError, match=re.escape(words)) as info:
        call(trainer(tmp_path, enable_checkpointing=False), module)
    assert "DataLoader" in str(info.value)


# ---------------------------------------------------------------------------------------------- training_step outputs
class NoLoss(RegressionModule):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"prediction": super().training_step(batch, batch_idx)}


class AlwaysNone(RegressionModule):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return None


def test_a_dict_without_loss_is_a_sentence(tmp_path):
    with pytest.raises(KeyError, match="without the key 'loss' \\(keys: \\['prediction'\\]\\)"):
        trainer(tmp_path, enable_checkpointing=False).fit(NoLoss(), loader())


def test_training_step_returning_none_every_step_warns_once_as_lightning(tmp_path):
    module = AlwaysNone()
    before = [p.detach().clone() for p in module.parameters()]
    run = trainer(tmp_path, enable_checkpointing=False, max_epochs=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run.fit(module, loader())
    skipped = [str(w.message) for w in caught if "returned None" in str(w.message)]
    assert len(skipped) == 1 and "AlwaysNone.training_step returned None for batch 0" in skipped[0]
    # the warning names the user's training_step (file and line), not the loop of accelkit that called it
    where = [(w.filename, w.lineno) for w in caught if "returned None" in str(w.message)]
    assert where == [(__file__, AlwaysNone.training_step.__code__.co_firstlineno)], where
    assert run.global_step == 8  # Lightning counts the (empty) optimizer steps too
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))


# ---------------------------------------------------------------------------------------------- default_root_dir
def test_a_root_dir_under_a_file_is_found_when_the_trainer_is_built(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ConfigurationError, match=r"a_file' is a file, not a folder"):
        trainer(blocker / "runs")
    trainer(blocker / "runs", enable_checkpointing=False)  # nothing is written there: no check


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_a_read_only_root_dir_is_found_when_the_trainer_is_built(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(ConfigurationError, match="is not writable"):
            trainer(locked / "runs")
    finally:
        locked.chmod(0o700)


# ---------------------------------------------------------------------------------------------- bad checkpoint files
@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("good")
    run = trainer(root)
    run.fit(RegressionModule(), loader())
    return run.checkpoint_path


def resume(path: Path, module: Any = None, root: Path | None = None) -> None:
    trainer(root or path.parent, max_epochs=2, enable_checkpointing=False).fit(module or RegressionModule(), loader(),
                                                                               ckpt_path=path)


def test_a_truncated_checkpoint(tmp_path, good_checkpoint):
    path = tmp_path / "cut.ckpt"
    path.write_bytes(good_checkpoint.read_bytes()[:1000])
    shutil.copy(good_checkpoint, tmp_path / "ok.ckpt")
    with pytest.raises(CheckpointError) as info:
        resume(path)
    message = str(info.value)
    assert str(path) in message and "truncated" in message and "1000 bytes" in message and "ok.ckpt" in message



def test_load_from_checkpoint_explains_a_truncated_file_too(tmp_path, good_checkpoint):
    path = tmp_path / "cut.ckpt"
    path.write_bytes(good_checkpoint.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated") as info:
        RegressionModule.load_from_checkpoint(path)
    assert str(path) in str(info.value)


def test_an_empty_checkpoint(tmp_path):
    path = tmp_path / "empty.ckpt"
    path.touch()
    with pytest.raises(CheckpointError, match=r"empty\.ckpt' is empty \(0 bytes\)"):
        resume(path)


def test_random_bytes_are_not_a_checkpoint_and_no_unsafe_load_is_suggested(tmp_path):
    path = tmp_path / "noise.ckpt"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(CheckpointError) as info:
        resume(path)
    assert "is not a PyTorch checkpoint" in str(info.value) and str(path) in str(info.value)
    assert "weights_only" not in str(info.value)


@pytest.mark.parametrize("kind", ["character device", "named pipe"])
def test_a_device_or_a_fifo_is_not_a_regular_file(tmp_path, kind):
    if kind == "named pipe":
        path = tmp_path / "pipe.ckpt"
        os.mkfifo(path)  # opening it would wait for a writer forever
    else:
        path = Path("/dev/zero")  # reading it would never end
    message = rf"checkpoint '{re.escape(str(path))}' is a {kind}, not a regular file"
    with pytest.raises(CheckpointError, match=message):
        resume(path, root=tmp_path)
    with pytest.raises(CheckpointError, match=message):
        RegressionModule.load_from_checkpoint(path)


def test_a_folder_lists_the_checkpoints_in_it(tmp_path, good_checkpoint):
    with pytest.raises(IsADirectoryError, match=re.escape(good_checkpoint.name)):
        checkpoint.load(good_checkpoint.parent)


def test_a_bare_state_dict_says_how_to_load_it(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(RegressionModule().state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        resume(path)
    assert str(path) in str(info.value) and "bare state_dict" in str(info.value)
    assert "load_state_dict" in str(info.value) and "trainer.save_checkpoint(path)" in str(info.value)


def test_objects_in_a_checkpoint_are_named_without_advising_unsafe_loading(tmp_path):
    path = tmp_path / "objects.ckpt"
    torch.save({"state_dict": {}, "thing": Path("x")}, path)
    with pytest.raises(UnsafeCheckpointError) as info:
        checkpoint.load(path)
    assert str(path) in str(info.value) and "PosixPath" in str(info.value)
    assert "weights_only=False" not in str(info.value)


def test_an_optimizer_mismatch_names_the_optimizer(tmp_path):
    class Momentum(RegressionModule):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    class Adam(RegressionModule):
        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters())

    first = trainer(tmp_path)
    first.fit(Momentum(), loader())
    with pytest.raises(ValueError, match=r"optimizer 0 \(Adam\) cannot take the checkpoint's state") as info:
        resume(first.checkpoint_path, Adam(), tmp_path / "again")
    assert str(info.value).startswith(f"checkpoint {str(first.checkpoint_path)!r}: ")  # the file is named


def test_weights_of_another_model_name_the_checkpoint(tmp_path):
    class Wider(RegressionModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 3)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch[0]).sum()

    first = trainer(tmp_path)
    first.fit(RegressionModule(), loader())
    with pytest.raises(RuntimeError, match="size mismatch") as info:
        resume(first.checkpoint_path, Wider(), tmp_path / "again")
    assert str(first.checkpoint_path) in str(info.value)


# ---------------------------------------------------------------------------------------------- failed writes
FULL_DISK = '''
import json, os, sys
import torch
from accelkit.checkpoint import files as checkpoint
folder = sys.argv[1] if len(sys.argv) > 1 else os.environ["TARGET"]
path = os.path.join(folder, "last.ckpt")
checkpoint.atomic_save({"weights": torch.arange(10.0)}, path)
{limit}
try:
    checkpoint.atomic_save({"weights": torch.zeros(200_000)}, path)
    error = None
except OSError as exc:
    error = [exc.errno, str(exc)]
kept = torch.load(path, weights_only=True)["weights"].tolist()
print(json.dumps({"error": error, "kept": kept, "left": sorted(os.listdir(folder))}))
'''


@pytest.mark.slow  # starts a process
def test_a_write_past_the_file_size_limit_is_an_oserror_naming_path_and_bytes(tmp_path, forked_python):
    code = FULL_DISK.replace("{limit}", "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))")
    out = forked_python(code, env={"TARGET": str(tmp_path)})  # the limit is the child's own
    errno_code, message = out["error"]
    assert errno_code == 27 and str(tmp_path / "last.ckpt") in message and "bytes" in message  # EFBIG
    assert "unexpected pos" not in message
    assert out["kept"] == list(map(float, range(10))) and out["left"] == ["last.ckpt"]


def _tmpfs_possible() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"],
                           capture_output=True, check=False)
    return probe.returncode == 0


@pytest.mark.slow  # starts a process
@pytest.mark.skipif(not _tmpfs_possible(), reason="needs unshare -rm to mount a tiny tmpfs")
def test_a_full_disk_is_an_oserror_naming_path_and_bytes(tmp_path):
    folder = tmp_path / "small"
    folder.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK.replace("{limit}", ""))
    proc = subprocess.run(["unshare", "-rm", "sh", "-c",
                           f"mount -t tmpfs -o size=128k tmpfs {folder} && exec {PYTHON} {script} {folder}"],
                          capture_output=True, text=True, env=child_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    errno_code, message = out["error"]
    assert errno_code == 28 and "the disk is full" in message and str(folder / "last.ckpt") in message
    assert "bytes free" in message
    assert out["kept"] == list(map(float, range(10))) and out["left"] == ["last.ckpt"]


@pytest.mark.slow  # starts a process
def test_temp_files_of_a_killed_writer_are_removed_at_the_next_save(tmp_path, prewarmed):
    path = tmp_path / "last.ckpt"
    running = prewarmed.start([str(TESTS / "helpers" / "killed_writer.py"), str(path)], cwd=tmp_path.parent,
                              env=child_env())
    try:
        line = next(iter(running.lines(timeout=120)), "")
        assert line.strip() == "WRITING", line + running.wait(0).stderr
        running.send_signal(signal.SIGKILL)
    finally:
        running.wait(30)
    left = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(left) == 1 and f"-{running.pid}-" in left[0].name
    other_host = tmp_path / ".last.ckpt.accelkit-tmp-elsewhere-1-abc.tmp"  # a writer on another machine
    other_host.write_bytes(b"in progress")
    checkpoint.atomic_save({"epoch": 3}, tmp_path / "other.ckpt")  # any save into the folder cleans up
    assert not left[0].exists() and other_host.exists()


# ---------------------------------------------------------------------------------------------- non-finite weights
class DivergesInEpochOne(RegressionModule):
    def on_train_epoch_end(self) -> None:
        if self.current_epoch == 1:
            with torch.no_grad():
                self.layer.weight.fill_(float("nan"))


def test_non_finite_weights_never_replace_the_last_good_checkpoint(tmp_path):
    run = trainer(tmp_path, max_epochs=3)
    with pytest.raises(CheckpointError) as info:
        run.fit(DivergesInEpochOne(), loader())
    message = str(info.value)
    assert "not finite" in message and "'layer.weight' (4 non-finite)" in message
    assert "ACCELKIT_ALLOW_NON_FINITE_CHECKPOINTS" in message
    kept = list((tmp_path / "checkpoints").iterdir())  # the default callback's one file: epoch 0's
    assert [path.name for path in kept] == [Path(run.checkpoint_callback.best_model_path).name]
    last = checkpoint.load(kept[0])
    assert last["epoch"] == 0 and torch.isfinite(last["state_dict"]["layer.weight"]).all()


def test_non_finite_checkpoints_can_be_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_ALLOW_NON_FINITE_CHECKPOINTS", "1")
    run = trainer(tmp_path, max_epochs=2)
    run.fit(DivergesInEpochOne(), loader())
    assert torch.isnan(checkpoint.load(run.checkpoint_path)["state_dict"]["layer.weight"]).all()
