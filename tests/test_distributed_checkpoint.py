"""accelkit.checkpoint.sharded in one process (no process group): sharded directories written atomically, read
whole, consolidated; a failed or killed save leaves no checkpoint; directory checkpoints through the Trainer and
ModelCheckpoint (top-k removal, last.ckpt as a copy or a link, ckpt_path="last")."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.checkpoint import sharded as dcp_io  # noqa: E402
from accelkit.checkpoint.files import UnsafeCheckpointError  # noqa: E402
from accelkit.strategies.single_device import SingleDeviceStrategy  # noqa: E402
from accelkit.trainer.dispatch import resolve_ckpt_path  # noqa: E402
from helpers.damage import RunsCommand, copy_checkpoint, flip_bytes, plant_malicious_index, truncate  # noqa: E402
from helpers.guards import child_env  # noqa: E402
from helpers.models import RegressionModule  # noqa: E402


def trained_state() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def checkpoint_of(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    return {"epoch": 2, "global_step": 7, "state_dict": model.state_dict(),
            "optimizer_states": [optimizer.state_dict()], "loops": {"resume_epoch": 3},
            "callbacks": {"ModelCheckpoint": {"best_model_score": torch.tensor(0.5)}}, "hyper_parameters": {"lr": 0.1}}


def test_save_then_load_full_and_consolidate(tmp_path):
    model, optimizer = trained_state()
    target = dcp_io.save(checkpoint_of(model, optimizer), tmp_path / "a.ckpt")
    assert dcp_io.is_sharded_checkpoint(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]  # no temporary left beside it
    loaded = dcp_io.load_full(target)
    assert loaded["epoch"] == 2 and loaded["global_step"] == 7 and loaded["loops"] == {"resume_epoch": 3}
    assert loaded["callbacks"]["ModelCheckpoint"]["best_model_score"] == 0.5
    for key, value in model.state_dict().items():
        assert torch.equal(loaded["state_dict"][key], value), key
    fresh, adam = trained_state()
    adam.load_state_dict(loaded["optimizer_states"][0])
    assert torch.equal(adam.state[fresh[0].weight]["exp_avg"], optimizer.state[model[0].weight]["exp_avg"])
    out = dcp_io.consolidate(target, tmp_path / "one.ckpt")
    plain = torch.load(out, weights_only=True)
    assert plain.keys() == loaded.keys()
    assert torch.equal(plain["state_dict"]["2.weight"], model[2].weight)


def test_a_second_save_replaces_the_directory_whole(tmp_path):
    model, optimizer = trained_state()
    dcp_io.save(checkpoint_of(model, optimizer), tmp_path / "a.ckpt")
    with torch.no_grad():
        model[0].weight.add_(1.0)
    dcp_io.save({**checkpoint_of(model, optimizer), "epoch": 5}, tmp_path / "a.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]
    loaded = dcp_io.load_full(tmp_path / "a.ckpt")
    assert loaded["epoch"] == 5 and torch.equal(loaded["state_dict"]["0.weight"], model[0].weight)


def test_a_failed_save_leaves_no_directory(tmp_path):
    model, optimizer = trained_state()
    state = checkpoint_of(model, optimizer)
    state["state_dict"]["not_picklable"] = lambda: None  # fails while DCP writes the non-tensor entries
    # the real error, not DCP's CheckpointException (a BaseException, which `except Exception` handlers miss)
    with pytest.raises(AttributeError, match="Can't pickle local object"):
        dcp_io.save(state, tmp_path / "a.ckpt")
    assert list(tmp_path.iterdir()) == []


KILLED_SAVE = """
import os, signal, sys, torch
from accelkit.checkpoint import sharded as dcp_io

class DiesWhenPickled:
    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGKILL)

state = {"state_dict": {"w": torch.ones(1000), "z": DiesWhenPickled()}, "epoch": 1}
dcp_io.save(state, sys.argv[1])
"""


@pytest.mark.slow
def test_a_killed_save_leaves_no_checkpoint_and_the_next_save_cleans_up(tmp_path, prewarmed):
    target = tmp_path / "a.ckpt"
    proc = prewarmed.run(["-c", KILLED_SAVE, str(target)], cwd=tmp_path.parent, env=child_env(), timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert not os.path.lexists(target)
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(dcp_io.hidden_sibling(target, "tmp-").name), leftovers
    assert not dcp_io.is_sharded_checkpoint(tmp_path / leftovers[0])
    model, optimizer = trained_state()
    dcp_io.save(checkpoint_of(model, optimizer), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]


def test_optimizer_state_by_name_and_back():
    model, optimizer = trained_state()
    by_index = optimizer.state_dict()
    by_name = dcp_io.optimizer_state_by_name(by_index, model, optimizer)
    assert by_name["param_groups"][0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert not dcp_io.keyed_by_index(by_name) and dcp_io.keyed_by_index(by_index)
    back = dcp_io.optimizer_state_by_index(by_name)
    assert back["param_groups"] == by_index["param_groups"]
    assert all(torch.equal(back["state"][i]["exp_avg"], by_index["state"][i]["exp_avg"]) for i in range(4))
    other = torch.optim.Adam(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="covers 4 parameters, the optimizer 2"):
        dcp_io.optimizer_state_by_name(by_index, torch.nn.Linear(2, 2), other)


def test_ckpt_path_accepts_a_sharded_directory_and_refuses_other_directories(tmp_path):
    model, optimizer = trained_state()
    dcp_io.save(checkpoint_of(model, optimizer), tmp_path / "a.ckpt")
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, logger=False, default_root_dir=tmp_path)
    assert resolve_ckpt_path(trainer, tmp_path / "a.ckpt", "fit", True) == tmp_path / "a.ckpt"
    with pytest.raises(IsADirectoryError, match="not a sharded checkpoint"):
        resolve_ckpt_path(trainer, tmp_path, "fit", True)
    with pytest.raises(FileNotFoundError):
        resolve_ckpt_path(trainer, tmp_path / "missing.ckpt", "fit", True)


class DirectoryCheckpoints(SingleDeviceStrategy):
    """One process whose checkpoints are sharded directories (one shard): the directory path of the core."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
        dcp_io.save(checkpoint, path)


def fit(root: Path, callback: Any, epochs: int, model: Any = None, **kwargs: Any) -> tuple[accelkit.Trainer, Any]:
    model = model or RegressionModule()
    trainer = accelkit.Trainer(accelerator="cpu", strategy=DirectoryCheckpoints(), devices=1, max_epochs=epochs,
                               logger=False, enable_progress_bar=False, enable_model_summary=False,
                               limit_val_batches=0, default_root_dir=root, callbacks=[callback])
    trainer.fit(model, **kwargs)
    return trainer, model


@pytest.mark.parametrize("save_last", [True, "link"])
def test_model_checkpoint_keeps_top_k_directories_and_last(tmp_path, save_last):
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_top_k=1, save_last=save_last)
    trainer, model = fit(tmp_path, callback, epochs=3)
    folder = tmp_path / "ckpt"
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=2-step=12.ckpt", "last.ckpt"]  # epochs 0, 1 removed
    assert dcp_io.is_sharded_checkpoint(folder / "epoch=2-step=12.ckpt")
    last = folder / "last.ckpt"
    assert last.is_symlink() == (save_last == "link") and dcp_io.is_sharded_checkpoint(last)
    loaded = RegressionModule.load_from_checkpoint(last)
    assert torch.equal(loaded.layer.weight, model.layer.weight)
    # ckpt_path="last" finds the directory and resumes from it
    resumed, _ = fit(tmp_path, accelkit.callbacks.ModelCheckpoint(dirpath=folder, save_top_k=1, save_last=save_last),
                     epochs=4, ckpt_path="last")
    assert resumed.global_step == 16
    assert sorted(p.name for p in folder.iterdir()) == ["epoch=3-step=16.ckpt", "last.ckpt"]
    assert dcp_io.load_full(folder / "last.ckpt")["global_step"] == 16


# ------------------------------------------------------------------------- nothing in a sharded checkpoint runs
@pytest.fixture(scope="module")
def genuine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sharded checkpoint written by a real (one-process) fit: two epochs, 8 steps."""
    root = tmp_path_factory.mktemp("genuine")
    fit(root, accelkit.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1), epochs=2)
    return root / "ckpt" / "epoch=1-step=8.ckpt"


def test_a_malicious_index_is_refused_on_every_one_device_path_and_never_runs(genuine, tmp_path, capsys):
    from accelkit import cli

    marker = tmp_path / "marker"
    bad = plant_malicious_index(copy_checkpoint(genuine, tmp_path / "bad.ckpt"), marker)
    refused = r"holds Python objects that safe loading refuses \(Unsupported global: GLOBAL posix.system\)"
    with pytest.raises(UnsafeCheckpointError, match=refused):
        RegressionModule.load_from_checkpoint(bad)
    with pytest.raises(UnsafeCheckpointError, match=refused):
        fit(tmp_path / "resume", accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "out"), epochs=3,
            ckpt_path=bad)
    assert cli.main(["checkpoint", "consolidate", str(bad), str(tmp_path / "one.ckpt")]) != 0
    assert "safe loading refuses (Unsupported global: GLOBAL posix.system)" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "one.ckpt").exists()
    assert RegressionModule.load_from_checkpoint(genuine).layer.weight.shape == (1, 4)  # the genuine one loads


@pytest.mark.parametrize("missing, what", [(dcp_io.METADATA_FILE, "the non-tensor part"),
                                           (".metadata", "DCP's index of the shards"), ("__0_0.distcp", None)])
def test_a_missing_file_of_a_sharded_checkpoint_is_named_on_every_path(genuine, tmp_path, capsys, missing, what):
    from accelkit import cli
    from accelkit.checkpoint.files import CheckpointError

    broken = copy_checkpoint(genuine, tmp_path / "broken.ckpt")
    (broken / missing).unlink()
    named = (rf"sharded checkpoint '.*broken\.ckpt' is incomplete: '.*broken\.ckpt/{re.escape(missing)}' "
             rf"\({re.escape(what)}.*\) is missing") if what else \
        rf"sharded checkpoint '.*broken\.ckpt' is damaged: its shard '.*/{missing}' cannot be read \(No such file"
    with pytest.raises(CheckpointError, match=named):
        RegressionModule.load_from_checkpoint(broken)
    with pytest.raises(CheckpointError, match=named):
        fit(tmp_path / "resume", accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "out"), epochs=3,
            ckpt_path=broken)
    with pytest.raises(CheckpointError, match=named):
        dcp_io.load_full(broken)
    assert cli.main(["checkpoint", "consolidate", str(broken), str(tmp_path / "one.ckpt")]) != 0
    assert re.search(named, capsys.readouterr().err)


def test_a_malicious_entry_in_a_shard_is_refused_unless_weights_only_false(tmp_path):
    marker = tmp_path / "marker"
    model, optimizer = trained_state()
    state = checkpoint_of(model, optimizer)
    state["state_dict"]["extra"] = RunsCommand(marker)  # pickled into the shard as an object entry
    target = dcp_io.save(state, tmp_path / "a.ckpt")
    with pytest.raises(UnsafeCheckpointError, match="GLOBAL posix.system"):
        dcp_io.load_full(target)
    assert not marker.exists()
    dcp_io.load_full(target, weights_only=False)  # the caller's explicit choice: it runs
    assert marker.exists()


def test_weights_only_false_reads_objects_kept_beside_the_shards(tmp_path):
    model, optimizer = trained_state()
    target = dcp_io.save({**checkpoint_of(model, optimizer), "note": RunsCommand(tmp_path / "x")}, tmp_path / "a.ckpt")
    with pytest.raises(UnsafeCheckpointError, match="posix.system"):
        dcp_io.load_full(target)
    dcp_io.load_full(target, weights_only=False)
    assert (tmp_path / "x").exists()


def flip_weight_bytes(directory: Path) -> None:
    """Invert the bytes of the saved ``layer.weight`` inside the shard: a valid file with other numbers."""
    weight = RegressionModule.load_from_checkpoint(directory).layer.weight.detach().numpy().tobytes()
    shard = next(directory.glob("*.distcp"))
    flip_bytes(shard, shard.read_bytes().index(weight), len(weight))


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / ".metadata").write_bytes(b""), r"its index '.*\.metadata' is empty \(0 bytes\)"),
    (lambda d: truncate(d / ".metadata", 100), r"its index '.*\.metadata' cannot be read \(100 bytes; "
                                               "UnpicklingError: pickle data was truncated"),
    (lambda d: flip_bytes(next(d.glob("*.distcp")), 0), r"its shard '.*__0_0\.distcp' \(\d+ bytes\) does not match "
                                                         "the checksum saved with it"),
    (flip_weight_bytes, r"its shard '.*__0_0\.distcp' \(\d+ bytes\) does not match the checksum saved with it"),
    (lambda d: truncate(next(d.glob("*.distcp")), 100), r"its shard '.*__0_0\.distcp' \(100 bytes\) does not "
                                                        "match"),
], ids=["empty index", "truncated index", "shard flipped at its start", "a weight's bytes flipped",
        "truncated shard"])
def test_a_damaged_index_or_shard_is_named_and_called_damaged(genuine, tmp_path, damage, message):
    from accelkit.checkpoint.files import CheckpointError

    broken = copy_checkpoint(genuine, tmp_path / "broken.ckpt")
    damage(broken)
    with pytest.raises(CheckpointError, match=r"sharded checkpoint '.*broken\.ckpt' is damaged: " + message) as info:
        RegressionModule.load_from_checkpoint(broken)
    assert not isinstance(info.value, UnsafeCheckpointError)
    with pytest.raises(CheckpointError, match="is damaged: " + message):
        fit(tmp_path / "resume", accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "out"), epochs=3,
            ckpt_path=broken)


def test_a_240_character_directory_name_saves_and_replaces(tmp_path):
    model, optimizer = trained_state()
    target = tmp_path / ("d" * 240 + ".ckpt")
    dcp_io.save(checkpoint_of(model, optimizer), target)
    dcp_io.save({**checkpoint_of(model, optimizer), "epoch": 5}, target)  # moved aside under a short name too
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
    assert dcp_io.load_full(target)["epoch"] == 5


def test_a_damaged_shard_of_a_checkpoint_saved_without_checksums_is_named(genuine, tmp_path):
    """Checkpoints written before the checksums (none saved): a broken shard is still named as damaged."""
    from accelkit.checkpoint.files import CheckpointError

    broken = copy_checkpoint(genuine, tmp_path / "old.ckpt")
    saved = torch.load(broken / dcp_io.METADATA_FILE, weights_only=True)
    del saved[dcp_io.CHECKSUMS_KEY]
    torch.save(saved, broken / dcp_io.METADATA_FILE)
    shard = next(broken.glob("*.distcp"))
    flip_bytes(shard, shard.stat().st_size // 2)
    with pytest.raises(CheckpointError, match=r"is damaged: its shard '.*__0_0\.distcp' cannot be read"):
        dcp_io.load_full(broken)
