"""Sharded checkpoints of real ``fsdp`` runs (2 and 4 CPU processes over gloo): written as directories by every
rank, resumed at other world sizes (2 -> 4, 2 -> 1), loaded into a plain module, consolidated into one file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fsdp_models import MLP, Block, Probe

import accelkit
from accelkit.checkpoint import sharded as dcp_io
from accelkit.errors import WorkerError
from helpers.compare import assert_same_weights
from helpers.damage import copy_checkpoint, flip_bytes, plant_malicious_index

pytestmark = pytest.mark.slow

QUIET = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
             limit_val_batches=0)


def trainer(root: Path, strategy: object = "fsdp", devices: int = 2, epochs: int = 2,
            **kwargs: object) -> accelkit.Trainer:
    return accelkit.Trainer(strategy=strategy, devices=devices, max_epochs=epochs, default_root_dir=root, **QUIET,
                            **kwargs)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Two epochs of fsdp on 2 processes, a sharded checkpoint after each epoch (and last.ckpt)."""
    root = tmp_path_factory.mktemp("fsdp2")
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, save_last=True)
    model = MLP()
    from accelkit_fsdp import FSDPStrategy

    run = trainer(root, strategy=FSDPStrategy(auto_wrap_policy="fsdp_models:Block"), callbacks=[callback])
    run.fit(model)
    return {"root": root, "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "trainer": run, "folder": root / "ckpt"}


def test_checkpoints_are_sharded_directories_written_by_every_rank(saved_run):
    folder = saved_run["folder"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"], names  # no temporary left
    for name in names:
        assert dcp_io.is_sharded_checkpoint(folder / name)
        shards = sorted(p.name for p in (folder / name).glob("*.distcp"))
        assert len(shards) == 2, shards  # one file per rank
    assert not (folder / "last.ckpt").is_symlink()  # a copy of the directory: survives top-k removal
    assert saved_run["trainer"].checkpoint_callback.best_model_path.endswith("epoch=1-step=8.ckpt")


def test_a_plain_module_loads_the_sharded_directory_without_a_process_group(saved_run):
    import torch.distributed as dist

    last = saved_run["folder"] / "last.ckpt"
    loaded = MLP.load_from_checkpoint(last)
    assert not dist.is_initialized()
    assert_same_weights(loaded.state_dict(), saved_run["weights"])
    # validate(ckpt_path=dir) on one device reads the whole checkpoint into the unsharded module
    model = MLP()
    run = accelkit.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                           default_root_dir=saved_run["root"] / "val")
    metrics = run.validate(model, ckpt_path=last, verbose=False)
    assert_same_weights(model.state_dict(), saved_run["weights"])
    assert metrics[0]["val_loss"] > 0


@pytest.fixture(scope="module")
def resumed_in_one_process(saved_run, tmp_path_factory):
    """The 2-process run's epoch-0 checkpoint resumed in one process without fsdp (in this process): its module,
    trainer and Probe record (one full copy of parameters, gradients and Adam state: what one process holds)."""
    root = tmp_path_factory.mktemp("one")
    model = MLP()
    run = trainer(root, strategy="auto", devices=1, enable_checkpointing=False, callbacks=[Probe(root, "one")])
    run.fit(model, ckpt_path=saved_run["folder"] / "epoch=0-step=4.ckpt")
    return model, run, torch.load(root / "one-rank0.pt", weights_only=True)


def total(record: dict) -> int:
    return sum(record["peak"].values())


def test_resume_at_four_processes_equals_the_uninterrupted_two_process_run(saved_run, resumed_in_one_process,
                                                                           tmp_path):
    """Also the 4-process case of test_fsdp.py's test_fsdp_equals_one_process_with_one_nth_of_its_memory_per_rank:
    4 spawned ranks, each holding a fourth of one process's parameters, gradients and Adam state during the steps,
    and the epoch they train ends where the 2-process run (equal to one process there) ended."""
    devices = 4
    model = MLP()
    run = trainer(tmp_path, devices=devices, enable_checkpointing=False, callbacks=[Probe(tmp_path, "four")])
    run.fit(model, ckpt_path=saved_run["folder"] / "epoch=0-step=4.ckpt")
    assert run.global_step == 8
    assert all(not hasattr(p, "to_local") for p in model.parameters())
    assert_same_weights(model.state_dict(), saved_run["weights"], atol=1e-5)
    records = [torch.load(tmp_path / f"four-rank{r}.pt", weights_only=True) for r in range(devices)]
    assert [r["rank"] for r in records] == list(range(devices))
    assert len({r["pid"] for r in records}) == devices and {r["launcher"] for r in records} == {"SpawnLauncher"}
    single = resumed_in_one_process[2]
    full = total(single)
    for record in records:
        for part in ("params", "grads", "optimizer"):
            assert 0 < record["peak"][part] <= single["peak"][part] / devices * 1.1, (part, record, single)
        assert total(record) == pytest.approx(full / devices, rel=0.1)
    assert sum(total(r) for r in records) == pytest.approx(full, rel=0.01)  # the shards add up to one copy


def test_resume_in_one_process_equals_the_uninterrupted_two_process_run(resumed_in_one_process, saved_run):
    model, run, _ = resumed_in_one_process
    assert run.global_step == 8
    assert_same_weights(model.state_dict(), saved_run["weights"], atol=1e-5)


def test_consolidate_command_writes_one_weights_only_file(saved_run, tmp_path, prewarmed):
    out = tmp_path / "model.ckpt"
    consolidate = ["-m", "accelkit.cli", "checkpoint", "consolidate", str(saved_run["folder"] / "last.ckpt"), str(out)]
    # the command as a program, forked from the prewarmed interpreter (helpers.prewarmed)
    proc = prewarmed.run(consolidate, cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr
    checkpoint = torch.load(out, weights_only=True)
    assert_same_weights(checkpoint["state_dict"], saved_run["weights"])
    assert checkpoint["epoch"] == 1 and checkpoint["global_step"] == 8
    (optimizer,) = checkpoint["optimizer_states"]
    assert optimizer["param_groups"][0]["params"] == list(range(len(saved_run["weights"])))  # optimizer.state_dict()
    fresh = MLP()
    adam = fresh.configure_optimizers()
    adam.load_state_dict(optimizer)  # the ordinary single-file format
    assert int(adam.state[fresh.head.weight]["step"]) == 8
    # the consolidated file resumes like any checkpoint; a second consolidate refuses to overwrite
    again = prewarmed.run(consolidate, cwd=tmp_path, env=dict(os.environ), timeout=120)
    assert again.returncode != 0 and "--force" in again.stderr


def test_ckpt_path_last_finds_the_directory(saved_run):
    run = saved_run["trainer"]
    from accelkit.trainer.dispatch import resolve_ckpt_path

    assert Path(resolve_ckpt_path(run, "last", "fit", True)).name == "last.ckpt"
    with pytest.raises(IsADirectoryError, match="not a sharded checkpoint"):
        resolve_ckpt_path(run, saved_run["root"], "fit", True)


def test_block_is_the_unit_the_string_policy_named():
    from accelkit_fsdp import FSDPStrategy

    assert FSDPStrategy(auto_wrap_policy="fsdp_models:Block").auto_wrap_policy == (Block,)


def test_a_malicious_index_is_refused_under_fsdp_and_never_runs(saved_run, tmp_path):
    marker = tmp_path / "marker"
    bad = plant_malicious_index(copy_checkpoint(saved_run["folder"] / "last.ckpt", tmp_path / "bad.ckpt"), marker)
    with pytest.raises(WorkerError, match=r"UnsafeCheckpointError: checkpoint '.*bad\.ckpt/\.metadata' holds Python "
                                          r"objects that safe loading refuses \(Unsupported global: GLOBAL posix"):
        trainer(tmp_path, devices=2, epochs=3, enable_checkpointing=False).fit(MLP(), ckpt_path=bad)
    assert not marker.exists()


def test_a_damaged_shard_is_named_under_fsdp(saved_run, tmp_path):
    broken = copy_checkpoint(saved_run["folder"] / "last.ckpt", tmp_path / "broken.ckpt")
    flip_bytes(broken / "__1_0.distcp", 0)
    with pytest.raises(WorkerError, match=r"CheckpointError: sharded checkpoint '.*broken\.ckpt' is damaged: its "
                                          r"shard '.*__1_0\.distcp' \(\d+ bytes\) does not match the checksum"):
        trainer(tmp_path, devices=2, epochs=3, enable_checkpointing=False).fit(MLP(), ckpt_path=broken)


def test_a_full_disk_at_save_is_the_error_and_the_previous_checkpoint_loads(tmp_path):
    """2 fsdp processes save each epoch into a 400 KiB tmpfs (mounted in a private mount namespace): the first
    checkpoint fits, the second does not."""
    import shutil

    unshare = shutil.which("unshare")
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    script = Path(__file__).with_name("disk_full_fsdp.py")
    mount = f"mount -t tmpfs -o size=400k tmpfs {disk}"
    if unshare is None or subprocess.run([unshare, "-rm", "sh", "-c", mount], capture_output=True).returncode:
        pytest.skip("needs a small tmpfs of its own: unshare -rm with mount -t tmpfs (user and mount namespaces)")
    command = f"{mount} && {sys.executable} {script} {disk} 3; code=$?; cp -a {disk} {kept}; exit $code"
    proc = subprocess.run([unshare, "-rm", "sh", "-c", command], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "OSError: [Errno 28] could not write sharded checkpoint '" in proc.stderr, proc.stderr[-3000:]
    assert "epoch=1-step=8.ckpt': No space left on device" in proc.stderr
    assert "without a Python exception" not in proc.stderr
    assert sorted(p.name for p in kept.iterdir()) == ["epoch=0-step=4.ckpt"]  # no partial directory left
    assert MLP.load_from_checkpoint(kept / "epoch=0-step=4.ckpt").head.weight.shape == (1, 64)


def sgd_strategy(sharded: bool) -> object:
    from accelkit_fsdp import FSDPStrategy

    return FSDPStrategy(save_distributed_checkpoint=sharded)


@pytest.fixture(scope="module")
def sgd_never_stopped(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Three epochs of plain SGD (no momentum: no optimizer state) under fsdp on 2 processes, never stopped: the
    final weights, and a sharded directory after each epoch."""
    root = tmp_path_factory.mktemp("sgd")
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1)
    model = MLP(optimizer="sgd", lr=0.01)
    trainer(root, strategy=sgd_strategy(True), epochs=3, callbacks=[callback]).fit(model)
    return {"weights": {k: v.detach().clone() for k, v in model.state_dict().items()}, "folder": root / "ckpt"}


@pytest.fixture(scope="module")
def sgd_resumed_from_a_directory(sgd_never_stopped, tmp_path_factory) -> dict[str, object]:
    """The never-stopped run's epoch-0 directory resumed under fsdp on 2 processes (another learning rate given),
    saving one file (``save_distributed_checkpoint=False``) after each epoch it trains."""
    root = tmp_path_factory.mktemp("sgd-resumed")
    callback = accelkit.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1)
    model = MLP(optimizer="sgd", lr=0.5)  # were the saved param groups not loaded, this rate would train on
    run = trainer(root, strategy=sgd_strategy(False), epochs=3, callbacks=[callback])
    run.fit(model, ckpt_path=sgd_never_stopped["folder"] / "epoch=0-step=4.ckpt")
    return {"model": model, "run": run, "folder": root / "ckpt"}


@pytest.mark.parametrize("sharded", [True, False], ids=["sharded-directory", "one-file"])
def test_plain_sgd_whose_optimizer_keeps_no_state_resumes_under_fsdp(tmp_path, sharded, sgd_never_stopped,
                                                                     request):
    """SGD without momentum keeps no per-parameter state, so its checkpoint's optimizer state holds no tensor:
    loading it used to fail in torch's ``set_optimizer_state_dict`` (``assert device is not None``, its path for a
    whole state finds no tensor to shard). It resumes now, from a sharded directory or one file: the resumed run,
    given another learning rate, takes the saved one (the param groups are loaded) and ends with the weights of the
    run never stopped (2 processes every time).

    One chain of runs serves both formats: the never-stopped run writes the sharded directories; the run resumed
    from its epoch-0 directory (the sharded case) writes one file per epoch (``save_distributed_checkpoint=False``),
    and the one-file case resumes from its epoch-1 file."""
    resumed = request.getfixturevalue("sgd_resumed_from_a_directory")
    if sharded:
        assert (sgd_never_stopped["folder"] / "epoch=0-step=4.ckpt").is_dir()
        model, run = resumed["model"], resumed["run"]
    else:
        one_file = resumed["folder"] / "epoch=1-step=8.ckpt"
        assert one_file.is_file()
        model = MLP(optimizer="sgd", lr=0.5)  # were the saved param groups not loaded, this rate would train on
        run = trainer(tmp_path, strategy=sgd_strategy(False), epochs=3, enable_checkpointing=False)
        run.fit(model, ckpt_path=one_file)
    assert run.global_step == 12
    assert_same_weights(model.state_dict(), sgd_never_stopped["weights"])
