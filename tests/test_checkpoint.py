"""Checkpoints: atomic writes, exact resume, and safe loading by default."""

from __future__ import annotations

import pickle
import re
import shutil
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.checkpoint import files as checkpoint  # noqa: E402
from helpers.damage import flip_record_byte  # noqa: E402
from helpers.fixtures import lightning_records  # noqa: E402
from helpers.guards import TESTS, child_env  # noqa: E402
from helpers.models import ExplodingPickle, Opaque, RegressionModule, quiet_trainer, regression_data  # noqa: E402


def temp_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.endswith(".tmp")]


# ---------------------------------------------------------------------------------------------- atomic writes
def test_failed_write_keeps_previous_checkpoint_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "last.ckpt"
    checkpoint.atomic_save({"epoch": 1, "weights": torch.arange(10.0)}, path)
    with pytest.raises(RuntimeError, match="pickling refused halfway"):
        checkpoint.atomic_save({"epoch": 2, "weights": torch.zeros(2_000_000), "bad": ExplodingPickle()}, path)
    loaded = checkpoint.load(path)
    assert loaded["epoch"] == 1 and torch.equal(loaded["weights"], torch.arange(10.0))
    assert temp_files(tmp_path) == []


class ExplodeAtEpoch(accelkit.Callback):
    """Makes the checkpoint written after epoch ``epoch`` unpicklable."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_save_checkpoint(self, trainer: Any, module: Any, state: dict[str, Any]) -> None:
        if state["epoch"] == self.epoch:
            state["bad"] = ExplodingPickle()


def test_trainer_checkpoint_failure_keeps_last_good_one(tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=3, logger=False, enable_progress_bar=False,
                               default_root_dir=tmp_path, callbacks=[ExplodeAtEpoch(2)])
    with pytest.raises(RuntimeError, match="pickling refused halfway"):
        trainer.fit(RegressionModule())
    saved = checkpoint.load(trainer.checkpoint_path)
    # "epoch" is the 0-based epoch the checkpoint was written in (Lightning's meaning): epoch 1 ended at step 8
    assert (saved["epoch"], saved["global_step"]) == (1, 8)
    assert temp_files(trainer.checkpoint_path.parent) == []


@pytest.mark.slow  # starts a process
def test_killed_writer_leaves_previous_checkpoint_intact(tmp_path, prewarmed):
    path = tmp_path / "last.ckpt"
    running = prewarmed.start([str(TESTS / "helpers" / "killed_writer.py"), str(path)], cwd=tmp_path.parent,
                              env=child_env())
    try:
        line = next(iter(running.lines(timeout=120)), "")  # once the second write is under way (or the child died)
        assert line.strip() == "WRITING", line + running.wait(0).stderr
        assert temp_files(tmp_path), "the second write should be in progress in a temporary file"
        running.send_signal(signal.SIGKILL)
    finally:
        done = running.wait(30)
    assert done.returncode == -signal.SIGKILL
    loaded = checkpoint.load(path)  # the previous, complete checkpoint, not a torn one
    assert loaded["epoch"] == 1 and torch.equal(loaded["weights"], torch.arange(1000.0))


# ---------------------------------------------------------------------------------------------- resume
class MomentumModule(RegressionModule):
    """SGD with momentum and a step-wise decaying rate: resuming must restore optimizer and scheduler state."""

    def __init__(self) -> None:
        super().__init__()
        self.epochs_started: list[int] = []
        self.save_hyperparameters(lr=0.05, momentum=0.9)

    def on_train_epoch_start(self) -> None:
        self.epochs_started.append(self.current_epoch)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def run(tmp_path: Path, max_epochs: int | None = None, ckpt_path: Any = None, weights_only: bool = True,
        **kwargs: Any) -> tuple[MomentumModule, Any]:
    model = MomentumModule()
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, logger=False,
                               enable_progress_bar=False, default_root_dir=tmp_path, **kwargs)
    trainer.fit(model, ckpt_path=ckpt_path, weights_only=weights_only)
    return model, trainer


def test_resume_continues_at_the_right_epoch_with_identical_results(tmp_path):
    full, full_trainer = run(tmp_path / "full", 4)
    first, _ = run(tmp_path / "split", 2)
    saved = checkpoint.load(tmp_path / "split" / "checkpoints" / "epoch=1-step=8.ckpt")  # the default, as Lightning
    assert (saved["epoch"], saved["global_step"]) == (1, 8)  # written at the end of epoch 1 (0-based)
    assert saved["loops"]["resume_epoch"] == 2
    assert saved["hyper_parameters"] == {"lr": 0.05, "momentum": 0.9}
    assert saved["optimizer_states"][0]["state"]  # momentum buffers are in it

    resumed, trainer = run(tmp_path / "split", 4, ckpt_path="last")
    assert resumed.epochs_started == [2, 3]
    assert (trainer.current_epoch, trainer.global_step) == (4, 16) == (full_trainer.current_epoch,
                                                                        full_trainer.global_step)
    lr = full_trainer.optimizers[0].param_groups[0]["lr"]
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(lr)
    for key, value in full.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value, atol=1e-7, rtol=0)
    # not trivially equal: two epochs are not four
    assert not torch.allclose(first.layer.weight, full.layer.weight, atol=1e-4)


def test_a_resume_of_a_run_that_had_already_stopped_warns_that_it_trains_nothing(tmp_path):
    """Resuming a checkpoint written at the fit's end with the same max_epochs (or a max_steps it had passed) trains
    nothing; Lightning only logs its stop line, and a fit that silently trains nothing looks like a success."""
    run(tmp_path, 2)
    for limits, reason in (({"max_epochs": 2}, "max_epochs=2 reached"),
                           ({"max_epochs": 4, "max_steps": 5}, "max_steps=5 reached")):
        with pytest.warns(UserWarning, match=r"resumed a run that had already stopped \(" + reason
                          + r" at the checkpoint's epoch 2, step 8\): this fit trains nothing\. To train further, "
                          r"give a max_epochs or max_steps beyond the checkpoint's"):
            resumed, trainer = run(tmp_path, ckpt_path="last", **limits)
        assert resumed.epochs_started == [] and trainer.global_step == 8
    with warnings.catch_warnings(record=True) as caught:  # one epoch left: it trains, and says nothing of the sort
        warnings.simplefilter("always")
        resumed, trainer = run(tmp_path, 3, ckpt_path="last")
    assert resumed.epochs_started == [2] and trainer.global_step == 12
    assert not [w for w in caught if "trains nothing" in str(w.message)]


# ---------------------------------------------------------------------------------------------- the default callback
@pytest.mark.slow  # runs Lightning's Trainer in a process of its own
def test_the_default_checkpoint_callback_writes_the_files_lightnings_writes(tmp_path):
    """Issue 38.1: with no checkpoint callback of the user's, the folder holds Lightning's one file,
    ``epoch=E-step=S.ckpt`` (accelkit added ``last.ckpt`` beside it: a program counting or globbing its folder saw
    two files), and the callback reports the same paths."""
    from helpers.default_checkpoints import SCENARIOS, record

    theirs = lightning_records(tmp_path / "lightning", "default_checkpoints")
    ours = {scenario: record("accelkit", str(tmp_path / "accelkit" / scenario), scenario) for scenario in SCENARIOS}
    assert ours == theirs
    assert all(len(run["files"]) == 1 and run["last_model_path"] == "" for run in ours.values()), ours


def test_last_resumes_from_the_default_callbacks_newest_file_without_a_last_ckpt(tmp_path):
    """``ckpt_path="last"`` with the default callback, which writes no ``last.ckpt``: the newest
    ``epoch=E-step=S.ckpt`` (a superset of Lightning, which finds nothing there); a callback that monitors a metric
    is not read that way (its newest file need not be its latest state), and the warning names what is looked for."""
    _, first = run(tmp_path, 2)
    assert not list(tmp_path.rglob("last*.ckpt"))
    resumed, trainer = run(tmp_path, 3, ckpt_path="last")
    assert trainer.ckpt_path == first.checkpoint_callback.best_model_path and resumed.epochs_started == [2]
    assert (tmp_path / "checkpoints" / "epoch=2-step=12.ckpt").is_file()

    monitored = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "checkpoints", monitor="train_loss")
    weights = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "checkpoints", save_weights_only=True)
    for callback in (monitored, weights):  # their newest file is not the latest full state: Lightning's rule
        with pytest.warns(UserWarning, match=r"no checkpoint in .*checkpoints \(last\*\.ckpt\) yet; starting from "):
            run(tmp_path, 1, ckpt_path="last", callbacks=[callback])
    looked_for = r"elsewhere/checkpoints \(last\*\.ckpt or epoch=\*-step=\*\.ckpt\) yet"
    with pytest.warns(UserWarning, match=r"no checkpoint in .*" + looked_for):
        run(tmp_path / "elsewhere", 1, ckpt_path="last")


def test_missing_ckpt_path_is_a_clear_error(tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                               default_root_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="nowhere.ckpt"):
        trainer.fit(RegressionModule(), ckpt_path=tmp_path / "nowhere.ckpt")


@pytest.mark.filterwarnings("ignore:The dirpath has changed")  # the resumed fit writes elsewhere
def test_a_checkpoint_set_on_the_trainer_is_loaded_by_the_next_stages_as_in_lightning(tmp_path):
    def trainer_for(folder: Path) -> accelkit.Trainer:
        return accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, default_root_dir=folder)

    first = trainer_for(tmp_path / "a")
    trained = RegressionModule()
    first.fit(trained)
    path = first.checkpoint_callback.best_model_path
    trainer = trainer_for(tmp_path / "b")
    trainer.ckpt_path = path
    assert trainer.requested_ckpt_path == path
    fresh = RegressionModule()
    trainer.validate(fresh)  # given no ckpt_path: loads the one set above
    assert trainer.ckpt_path == path
    torch.testing.assert_close(fresh.layer.weight, trained.layer.weight, rtol=0, atol=0)
    trainer.test(RegressionModule())  # and the stage after it too
    assert trainer.ckpt_path == path
    with pytest.warns(UserWarning, match=r"trainer.ckpt_path was set to .*test\(ckpt_path=.*is loaded"):
        trainer.test(RegressionModule(), ckpt_path=path)
    assert trainer.requested_ckpt_path is None
    trainer.validate(RegressionModule())
    assert trainer.ckpt_path is None  # the request ended when a stage was given its own checkpoint


@pytest.mark.filterwarnings("ignore:The dirpath has changed")  # the resumed fit writes elsewhere
def test_each_stage_given_a_checkpoint_says_which_file_it_loaded(tmp_path, capsys):
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, default_root_dir=tmp_path)
    model = RegressionModule()
    trainer.fit(model)
    path = trainer.checkpoint_callback.best_model_path
    capsys.readouterr()
    trainer.test(model, ckpt_path=path, verbose=False)
    trainer.validate(model, ckpt_path="last", verbose=False)
    trainer.predict(model, dataloaders=model.test_dataloader(), ckpt_path=path)
    accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=tmp_path / "again").fit(model, ckpt_path=path)
    lines = [line for line in capsys.readouterr().out.splitlines() if "loaded checkpoint" in line]
    assert lines == [f"accelkit: {stage}() loaded checkpoint {path}"
                     for stage in ("test", "validate", "predict", "fit")]
    capsys.readouterr()
    trainer.test(model, verbose=False)  # no checkpoint given, none loaded: nothing said
    assert "loaded checkpoint" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- safe loading
class AddOpaque(accelkit.Callback):
    """Puts an arbitrary pickled object into every checkpoint."""

    def on_save_checkpoint(self, trainer: Any, module: Any, state: dict[str, Any]) -> None:
        state["opaque"] = Opaque("from a callback")


def test_loading_refuses_arbitrary_objects_unless_weights_only_false(tmp_path):
    _, trainer = run(tmp_path, 1, callbacks=[AddOpaque()])
    path = trainer.checkpoint_path
    with pytest.raises(pickle.UnpicklingError, match="holds Python objects that safe loading refuses"):
        checkpoint.load(path)
    assert checkpoint.load(path, weights_only=False)["opaque"] == Opaque("from a callback")

    with pytest.raises(pickle.UnpicklingError, match="Opaque"):
        run(tmp_path, 2, ckpt_path=path)
    resumed, resumed_trainer = run(tmp_path, 2, ckpt_path=path, weights_only=False)
    assert resumed.epochs_started == [1] and resumed_trainer.current_epoch == 2


def test_save_checkpoint_outside_a_run_names_what_is_missing(tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, enable_progress_bar=False, logger=False)
    with pytest.raises(ValueError, match=r"save_checkpoint\(path, model=my_module\)"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
    module = RegressionModule()
    trainer.save_checkpoint(tmp_path / "x.ckpt", model=module)
    saved = torch.load(tmp_path / "x.ckpt", weights_only=True)
    assert saved["state_dict"].keys() == module.state_dict().keys()
    assert all(torch.equal(saved["state_dict"][k], v) for k, v in module.state_dict().items())


def test_a_240_character_filename_saves(tmp_path):
    """245 characters with ``.ckpt``, under the 255-byte limit: the temporary file's name must not add to it."""
    name = "m" * 240
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", filename=name)
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, default_root_dir=tmp_path, callbacks=[callback])
    trainer.fit(RegressionModule())
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == [name + ".ckpt"]  # no temporary left beside it
    assert checkpoint.load(tmp_path / "ckpt" / (name + ".ckpt"))["global_step"] == 4


# ---------------------------------------------------------------------------------------------- paths a callback trusts
def test_only_checkpoints_inside_the_folder_may_be_removed_links_followed(tmp_path):
    """``accelkit.checkpoint.paths``: what a checkpoint callback may remove (and trust when a checkpoint's state
    names it) is decided on resolved paths and on the file's format, not on the path as written."""
    from accelkit.checkpoint import paths, sharded

    folder, outside = tmp_path / "ckpt", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    torch.save({"epoch": 0}, folder / "a.ckpt")
    torch.save({"epoch": 0}, outside / "b.ckpt")
    (folder / "notes.txt").write_text("not a checkpoint")
    (folder / "data").mkdir()
    sharded.save({"state_dict": {"w": torch.zeros(2)}, "epoch": 0}, folder / "sharded.ckpt")
    (folder / "link.ckpt").symlink_to(folder / "a.ckpt")
    (folder / "out.ckpt").symlink_to(outside / "b.ckpt")
    (folder / "elsewhere").symlink_to(outside, target_is_directory=True)

    assert paths.removal_refusal(folder / "a.ckpt", folder) is None
    assert paths.removal_refusal(folder / "sharded.ckpt", folder) is None
    assert paths.removal_refusal(folder / "link.ckpt", folder) is None  # the link goes, not its target
    assert paths.removal_refusal(folder / "notes.txt", folder) == ("it is not a checkpoint file (torch.save writes a "
                                                                   "zip archive)")
    assert paths.removal_refusal(folder / "data", folder) == ("it is a folder but not a sharded checkpoint (it holds "
                                                              f"no {sharded.METADATA_FILE})")
    assert paths.removal_refusal(folder / "out.ckpt", folder) == ("it is a symbolic link pointing outside the "
                                                                  f"callback's folder, to {str(outside / 'b.ckpt')!r}")
    # outside, as written or through a link, or nothing there: not this callback's, nothing to say
    for path in (f"{folder}/../outside/b.ckpt", folder / "elsewhere" / "b.ckpt", folder / "gone.ckpt"):
        assert paths.removal_refusal(path, folder) == ""
    assert paths.removal_refusal(folder, folder) == ""

    assert paths.restore_refusal(str(folder / "a.ckpt"), folder) is None
    assert paths.restore_refusal(str(folder / "gone.ckpt"), folder) is None  # deleted since: it would be ours
    assert paths.restore_refusal(f"{folder}/../outside/b.ckpt", folder) == ("outside the folder, .. and symbolic "
                                                                            "links followed")
    assert paths.restore_refusal(str(folder / "elsewhere" / "b.ckpt"), folder) == ("outside the folder, .. and "
                                                                                   "symbolic links followed")
    assert paths.restore_refusal(3, folder) == "not a path but a value of type int"
    assert paths.restore_refusal(str(folder / "notes.txt"), folder) == ("it is not a checkpoint file (torch.save "
                                                                        "writes a zip archive)")

# ---------------------------------------------------------------------------------------------- checksums
@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint written by a real fit: one epoch of SGD with momentum (a weight, a momentum buffer)."""
    root = tmp_path_factory.mktemp("trained")
    return run(root, 1)[1].checkpoint_path


def record_holding(file: Path, tensor: torch.Tensor) -> str:
    """The name of the one record of the archive ``file`` whose bytes are ``tensor``'s."""
    import zipfile

    wanted = tensor.contiguous().numpy().tobytes()
    with zipfile.ZipFile(file) as archive:
        found = [i.filename for i in archive.infolist() if "/data/" in i.filename and archive.read(i) == wanted]
    assert len(found) == 1, found
    return found[0]


def every_load_path(path: Path, root: Path) -> list[Any]:
    """What loading ``path`` raises (or returns) on each path that reads a checkpoint file."""
    loader = torch.utils.data.DataLoader(regression_data(8), batch_size=4)
    def from_open_file() -> Any:
        with open(path, "rb") as handle:
            return checkpoint.load(handle)

    calls = [lambda: checkpoint.load(path), from_open_file,
             lambda: MomentumModule.load_from_checkpoint(path), lambda: run(root, 2, ckpt_path=path),
             lambda: quiet_trainer(root).validate(MomentumModule(), ckpt_path=path),
             lambda: quiet_trainer(root).test(MomentumModule(), ckpt_path=path),
             lambda: quiet_trainer(root).predict(MomentumModule(), loader, ckpt_path=path)]
    outcomes = []
    for call in calls:
        try:
            outcomes.append(call())
        except Exception as exc:  # noqa: BLE001 - each outcome is checked by the caller
            outcomes.append(exc)
    return outcomes


@pytest.mark.parametrize("entry", ["weight", "momentum buffer"])
def test_a_flipped_byte_inside_a_tensor_is_named_as_damage_on_every_load_path(tmp_path, trained, entry):
    path = Path(shutil.copy(trained, tmp_path / "flipped.ckpt"))
    saved = torch.load(path, weights_only=True)
    tensor = saved["state_dict"]["layer.weight"] if entry == "weight" else \
        saved["optimizer_states"][0]["state"][0]["momentum_buffer"]
    record = record_holding(path, tensor)
    flip_record_byte(path, record, at=1)
    plain = torch.load(path, weights_only=True)  # torch itself reads the changed value without a word
    changed = plain["state_dict"]["layer.weight"] if entry == "weight" else \
        plain["optimizer_states"][0]["state"][0]["momentum_buffer"]
    assert not torch.equal(changed, tensor)
    named = re.compile(rf"checkpoint '{re.escape(str(path))}' is damaged: its record '{re.escape(record)}' does not "
                       "match the checksum saved with it")
    outcomes = every_load_path(path, tmp_path / "runs")
    for outcome in outcomes:
        assert isinstance(outcome, checkpoint.CheckpointError) and named.search(str(outcome)), outcome
        assert not isinstance(outcome, checkpoint.UnsafeCheckpointError)


@pytest.mark.parametrize("checksums", [True, False], ids=["with checksums", "without checksums"])
def test_a_damaged_data_pkl_is_called_damaged_not_unsafe(tmp_path, trained, checksums):
    path = tmp_path / "pickle.ckpt"
    torch.serialization.set_crc32_options(checksums)
    try:
        torch.save(torch.load(trained, weights_only=True), path)
    finally:
        torch.serialization.set_crc32_options(True)
    flip_record_byte(path, "data.pkl", at=0, mask=0xFF)  # the pickle's first opcode: garbage to the unpickler
    said = "its record '.*data.pkl' does not match the checksum" if checksums else \
        r"its data.pkl cannot be unpickled \(Unsupported operand 127\)"
    for outcome in every_load_path(path, tmp_path / "runs"):
        assert isinstance(outcome, checkpoint.CheckpointError), outcome
        assert not isinstance(outcome, checkpoint.UnsafeCheckpointError), outcome
        assert re.search(rf"checkpoint '.*pickle\.ckpt' is damaged: {said}", str(outcome)), outcome


@pytest.mark.parametrize("old", ["crc32 off", "legacy format"])
def test_a_checkpoint_without_checksums_loads_and_resumes_as_before(tmp_path, trained, old):
    """Files torch wrote without checksums: after ``set_crc32_options(False)`` (every record's CRC-32 is 0), or in
    the pre-1.6 format (no archive). They load unchecked, as before; a genuine checkpoint is checked."""
    saved = torch.load(trained, weights_only=True)
    path = tmp_path / "old.ckpt"
    if old == "legacy format":
        torch.save(saved, path, _use_new_zipfile_serialization=False)
    else:
        torch.serialization.set_crc32_options(False)
        try:
            torch.save(saved, path)
        finally:
            torch.serialization.set_crc32_options(True)
    assert checkpoint.verify_archive(path) is False and checkpoint.verify_archive(trained) is True
    loaded = MomentumModule.load_from_checkpoint(path)
    assert torch.equal(loaded.layer.weight, saved["state_dict"]["layer.weight"])
    resumed, trainer = run(tmp_path, 2, ckpt_path=path)
    assert resumed.epochs_started == [1] and trainer.global_step == 8


def test_verifying_leaves_an_open_file_where_it_was(tmp_path, trained):
    with open(trained, "rb") as handle:
        handle.seek(7)
        assert checkpoint.verify_archive(handle) is True and handle.tell() == 7


@pytest.mark.parametrize("threads", [True, False], ids=["on threads", "on one thread"])
def test_verifying_names_the_damaged_record_whichever_way_it_reads(tmp_path, trained, monkeypatch, threads):
    from accelkit.checkpoint import files

    monkeypatch.setattr(files, "PARALLEL_CHECK_BYTES", 0 if threads else 2**62)  # the real threads, or none
    path = Path(shutil.copy(trained, tmp_path / "flipped.ckpt"))
    record = record_holding(path, torch.load(path, weights_only=True)["state_dict"]["layer.weight"])
    assert files.verify_archive(path) is True
    flip_record_byte(path, record, at=3, mask=0x80)
    with pytest.raises(checkpoint.CheckpointError, match=rf"its record '{re.escape(record)}' does not match"):
        files.verify_archive(path)


def test_a_damaged_record_header_is_named(tmp_path, trained):
    import zipfile

    path = Path(shutil.copy(trained, tmp_path / "header.ckpt"))
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))
    data = bytearray(path.read_bytes())
    data[info.header_offset + 30] ^= 0x20  # the first letter of the record's name in its own header
    path.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match=rf"its record '{re.escape(info.filename)}' has a damaged "
                                                         r"header \(its name differs from the archive's directory\)"):
        checkpoint.load(path)


def test_a_damaged_archive_directory_is_named(tmp_path, trained):
    path = Path(shutil.copy(trained, tmp_path / "directory.ckpt"))
    data = bytearray(path.read_bytes())
    data[data.rfind(b"PK\x01\x02") + 3] ^= 0xFF  # the signature of the directory's last entry
    path.write_bytes(bytes(data))
    with pytest.raises(checkpoint.CheckpointError, match=r"checkpoint '.*directory\.ckpt' is damaged: the directory "
                                                         r"of its zip archive cannot be read \(BadZipFile"):
        checkpoint.load(path)
