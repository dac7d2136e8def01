"""Exact resume (issue 10, part 3): a run killed at any step and resumed from ``ckpt_path="last"`` ends with the
weights of a run never stopped: same batches in the same order, same dropout masks, same optimizer/scheduler."""

from __future__ import annotations

import random
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, RandomSampler, Sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from accelkit.checkpoint import files as ckpt  # noqa: E402
from accelkit.loops import resume  # noqa: E402
from helpers.guards import TESTS, child_env  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402
from helpers.resume_data import indexed_fit  # noqa: E402
from helpers.resume_fit import DropoutNet, dataset, make_trainer  # noqa: E402

SCRIPT = TESTS / "helpers" / "resume_fit.py"


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------------------------------------- units
def test_random_states_round_trip_through_a_weights_only_checkpoint(tmp_path):
    import numpy as np

    saved = resume.rng_states()
    first = (torch.rand(3), np.random.rand(3), random.random())
    ckpt.atomic_save({"rng": saved}, tmp_path / "rng.ckpt")
    loaded = ckpt.load(tmp_path / "rng.ckpt", weights_only=True)["rng"]
    torch.rand(5), np.random.rand(7), random.random()  # move every stream on
    resume.set_rng_states(loaded)
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(first[0], again[0]) and (first[1] == again[1]).all() and first[2] == again[2]


class Counting(Dataset):
    """Counts the samples loaded."""

    def __init__(self, n: int) -> None:
        self.n, self.loaded = n, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        self.loaded.append(index)
        return index


def test_skipping_batches_draws_the_same_order_and_loads_nothing_skipped():
    data = Counting(20)
    loader = DataLoader(data, batch_size=3, shuffle=True)
    torch.manual_seed(5)
    full = [b.tolist() for b in loader]
    data.loaded.clear()
    torch.manual_seed(5)
    tail = [b.tolist() for b in resume.skip_batches(loader, 4)]
    assert tail == full[4:]
    assert sorted(data.loaded) == sorted(i for b in full[4:] for i in b)  # the skipped samples were never read
    generator = torch.Generator().manual_seed(3)
    inner = BatchSampler(RandomSampler(range(10), generator=generator), 2, False)
    whole = list(inner)
    generator.manual_seed(3)
    assert list(resume.SkipSampler(inner, 2)) == whole[2:] and len(resume.SkipSampler(inner, 2)) == 3


def test_trained_indices_are_kept_as_one_bit_per_sample():
    mask = torch.rand(1003, generator=torch.Generator().manual_seed(0)) > 0.5
    packed = resume.pack_mask(mask)
    assert packed.dtype == torch.uint8 and packed.numel() == 126
    assert torch.equal(resume.unpack_mask(packed, 1003), mask)


class StopAt(accelkit.Callback):
    """Raises after ``step`` optimizer steps (a crash between two checkpoints); records what the resumed run sees."""

    def __init__(self, step: int | None = None) -> None:
        self.step, self.first_batch, self.epoch_starts = step, None, []

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self.epoch_starts.append(trainer.current_epoch)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.first_batch is None:
            self.first_batch = (trainer.current_epoch, batch_idx, trainer.global_step)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise RuntimeError("stopped here")


def fit_until(root: Path, stop: int | None, stateful: bool = False, **kwargs: Any) -> tuple[Any, StopAt]:
    accelkit.seed_everything(0)
    model = DropoutNet(stateful=stateful)
    probe = StopAt(stop)
    trainer = make_trainer(root, epochs=3, every=5, callbacks=[probe], **kwargs)
    last = "last" if any((root / "checkpoints").glob("last*.ckpt")) else None
    try:
        trainer.fit(model, ckpt_path=last)
    except RuntimeError as exc:
        assert "stopped here" in str(exc)
    return model, probe


@pytest.mark.parametrize("stateful", [False, True], ids=["DataLoader", "StatefulDataLoader"])
def test_resume_in_the_middle_of_an_epoch_continues_after_the_batches_trained_on(tmp_path, stateful):
    if stateful:
        pytest.importorskip("torchdata.stateful_dataloader")
    reference, _ = fit_until(tmp_path / "ref", None, stateful)
    fit_until(tmp_path / "run", 8, stateful)  # last.ckpt of step 5: epoch 0, 5 of its 12 batches
    saved = ckpt.load(tmp_path / "run" / "checkpoints" / "last.ckpt")
    position = saved["loops"]["position"]
    assert (saved["global_step"], position["epoch"], position["batches"]) == (5, 0, 5)
    if stateful:
        assert position["ranks"][0]["loader"]["_num_yielded"] == 5  # no batch read ahead of its step
    _, probe = fit_until(tmp_path / "run", 17, stateful)  # resumes mid-epoch 0; dies in epoch 1 (last: step 15)
    assert probe.first_batch == (0, 5, 5)  # batch 5 of epoch 0 comes next, at step 5: nothing replayed
    assert probe.epoch_starts == [1]  # as Lightning: on_train_epoch_start is not called again for epoch 0
    resumed, probe = fit_until(tmp_path / "run", None, stateful)
    assert probe.first_batch == (1, 3, 15)
    assert same_weights(reference.state_dict(), resumed.state_dict())


def test_epoch_end_checkpoint_resumes_at_the_next_epoch_with_the_same_random_streams(tmp_path):
    reference, _ = fit_until(tmp_path / "ref", None)
    checkpoint = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "run" / "checkpoints", save_last=True,
                                                    save_top_k=0)
    accelkit.seed_everything(0)
    model = DropoutNet()
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_progress_bar=False,
                               enable_model_summary=False, default_root_dir=tmp_path / "run", callbacks=[checkpoint])
    trainer.fit(model)
    saved = ckpt.load(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert saved["loops"]["resume_epoch"] == 1 and saved["loops"]["position"]["batches"] == 0
    resumed, probe = fit_until(tmp_path / "run", None)
    assert probe.first_batch == (1, 0, 12)
    assert same_weights(reference.state_dict(), resumed.state_dict())


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.randn(40, 6, generator=torch.Generator().manual_seed(0)).split(1))


class Shuffled(Sampler):
    """A user sampler without state_dict."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(torch.randperm(self.n).tolist())


@pytest.mark.parametrize("kind", ["iterable", "sampler"])
def test_what_cannot_be_resumed_exactly_is_named_at_resume(tmp_path, kind):
    class Model(DropoutNet):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x = batch[0] if isinstance(batch, (list, tuple)) else batch
            return self(x).pow(2).mean()

        def train_dataloader(self) -> Any:
            if kind == "iterable":
                return DataLoader(Stream(), batch_size=4)
            data = dataset()
            return DataLoader(data, batch_size=4, sampler=Shuffled(len(data)))

    for stop in (7, None):
        accelkit.seed_everything(0)
        trainer = make_trainer(tmp_path, epochs=1, every=5, callbacks=[StopAt(stop)])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                trainer.fit(Model(), ckpt_path="last" if stop is None else None)
            except RuntimeError as exc:
                assert "stopped here" in str(exc)
    named = "Stream" if kind == "iterable" else "Shuffled"
    assert any(named in str(w.message) and "resum" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert trainer.global_step == (10 if kind == "iterable" else 12)  # the epoch ran to its end, once


def test_checkpoint_outside_fit_and_weights_only_carry_no_position(tmp_path):
    accelkit.seed_everything(0)
    model = DropoutNet()
    trainer = make_trainer(tmp_path, epochs=1, every=0)
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "after.ckpt")
    trainer.save_checkpoint(tmp_path / "weights.ckpt", weights_only=True)
    assert "position" not in ckpt.load(tmp_path / "after.ckpt")["loops"]
    assert "position" not in ckpt.load(tmp_path / "weights.ckpt")["loops"]


# ---------------------------------------------------------------------------------------------- preemption loop
def run_script(prewarmed: Prewarmed, root: Path, strategy: str, devices: int, kill_at: int | None, every: int = 3,
               timeout: float = 120.0) -> list[int]:
    """Run the helper fit as a program forked from the prewarmed interpreter, in its own process group; SIGKILL the
    group once it reports step ``kill_at``. Returns the steps it reported."""
    env = child_env()
    env["STEP_SLEEP_S"] = "0.03"
    running = prewarmed.start([str(SCRIPT), str(root), strategy, str(devices), "3", str(every)], cwd=root.parent,
                              env=env)
    steps: list[int] = []
    try:
        for line in running.lines(timeout):
            if line.startswith("step "):
                steps.append(int(line.split()[1]))
                if kill_at is not None and steps[-1] >= kill_at:
                    running.kill()
                    break
    finally:
        done = running.wait(30)
    if kill_at is None:
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        assert done.returncode == -signal.SIGKILL or (done.returncode == 0 and (root / "final.pt").exists()), \
            done.stderr[-3000:]
    return steps


def preemption_loop(prewarmed: Prewarmed, tmp_path: Path, strategy: str, devices: int, steps_total: int, kills: int,
                    seed: int, every: int, reference: str | None = None) -> None:
    """SIGKILL the run at ``kills`` random steps (seeded), resuming each time from ``ckpt_path="last"``; the final
    weights equal those of a run never stopped (under ``reference``, the strategy itself if None)."""
    run_script(prewarmed, tmp_path / "ref", reference or strategy, devices, None, every)
    reference = torch.load(tmp_path / "ref" / "final.pt", weights_only=True)
    root = tmp_path / "run"
    targets = sorted(random.Random(seed).sample(range(2, steps_total - 1), kills))
    mid_epoch = 0
    for target in targets + [None]:
        last = root / "checkpoints" / "last.ckpt"
        saved = ckpt.load(last) if last.exists() else None
        resumed_from = saved["global_step"] if saved else 0
        mid_epoch += bool(saved and saved["loops"]["position"]["batches"])
        steps = run_script(prewarmed, root, strategy, devices, target, every)
        assert steps and steps[0] == resumed_from + 1, (steps[:3], resumed_from)  # no batch trained twice
    final = torch.load(root / "final.pt", weights_only=True)
    assert mid_epoch >= 1, "no kill landed where the run resumes inside an epoch"
    assert same_weights(reference, final)


@pytest.mark.slow
def test_preemption_loop_single_process_is_bit_identical(tmp_path, prewarmed):
    # 12 batches per epoch, a checkpoint every 3 steps; the seed draws kills at steps 2, 8 and 24: one before the
    # first checkpoint (the run starts over), one inside epoch 0 (resumes mid-epoch), one at the end of epoch 1
    # (resumes at an epoch boundary). Three kills, each a process start, cover the cases the five of the old seed
    # did (steps 2, 4, 15, 29, 32: the start over and mid-epoch resumes), and an epoch boundary besides.
    preemption_loop(prewarmed, tmp_path, "auto", 1, steps_total=36, kills=3, seed=105, every=3)


@pytest.mark.slow
def test_preemption_loop_ddp_spawn_is_bit_identical(tmp_path, prewarmed):
    # 6 batches per epoch and rank. The run never stopped is a ddp_fork run: the same strategy, samplers and
    # collectives, bit for bit the same weights as a ddp_spawn run (so the resumed ddp_spawn run must equal both),
    # without two more fresh worker interpreters
    preemption_loop(prewarmed, tmp_path, "ddp_spawn", 2, steps_total=18, kills=2, seed=11, every=4,
                    reference="ddp_fork")


@pytest.mark.slow
def test_sigint_checkpoint_resumes_inside_the_epoch_exactly(tmp_path, prewarmed):
    """Ctrl-C writes interrupted.ckpt at a batch end; its line says where the run continues; resuming from it ends
    with the weights of a run never stopped."""
    reference, _ = fit_until(tmp_path / "ref", None)
    env = child_env()
    env["STEP_SLEEP_S"] = "0.05"
    root = tmp_path / "run"
    running = prewarmed.start([str(SCRIPT), str(root), "auto", "1", "3", "100"], cwd=tmp_path, env=env)
    try:
        for line in running.lines(timeout=120):
            if line.strip() == "step 5":
                running.send_signal(signal.SIGINT)
                break
    finally:
        stopped = running.wait(60)
    err = stopped.stderr
    assert stopped.returncode != 0 and "it continues with batch" in err, err[-2000:]
    saved = ckpt.load(root / "checkpoints" / "interrupted.ckpt")
    assert saved["loops"]["position"]["batches"] == saved["global_step"] >= 5  # inside epoch 0
    env["RESUME_FROM"] = str(root / "checkpoints" / "interrupted.ckpt")
    done = prewarmed.run([str(SCRIPT), str(root), "auto", "1", "3", "100"], cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"fit() loaded checkpoint {root / 'checkpoints' / 'interrupted.ckpt'}" in done.stdout
    steps = [int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("step ")]
    assert steps[0] == saved["global_step"] + 1  # its first step follows the checkpoint's
    assert same_weights(reference.state_dict(), torch.load(root / "final.pt", weights_only=True))


# ---------------------------------------------------------------------------------------------- foreign checkpoints
class LinearNet(accelkit.Module):
    """The shapes of the Lightning-made fixtures (``helpers/lightning_checkpoints.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Seen(accelkit.Callback):
    """Records ``(epoch, global_step, batch_idx)`` of every training batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, int]] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.batches.append((trainer.current_epoch, trainer.global_step, batch_idx))


def fit_from(root: Path, ckpt_path: Any, epochs: int = 2, batch_size: int = 4) -> Seen:
    from helpers.lightning_checkpoints import dataset as lightning_data

    seen = Seen()
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=False,
                               enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                               default_root_dir=root, callbacks=[seen])
    trainer.fit(LinearNet(), DataLoader(lightning_data(), batch_size=batch_size), ckpt_path=ckpt_path)
    return seen


def test_lightning_epoch_end_checkpoint_resumes_at_the_next_epoch_as_lightning_does(tmp_path):
    from helpers.lightning_checkpoints import EPOCH_END

    seen = fit_from(tmp_path, EPOCH_END)  # Lightning wrote it at the end of epoch 0 (step 8)
    assert seen.batches[0] == (1, 8, 0) and len(seen.batches) == 8  # epoch 1 only: epoch 0 is not trained again


def test_lightning_mid_epoch_checkpoint_resumes_after_the_batches_it_processed(tmp_path):
    from helpers.lightning_checkpoints import MID_EPOCH

    with pytest.warns(UserWarning, match=r"written by Lightning 2\.\d+\.\d+ inside epoch 1, after 7 batch"):
        seen = fit_from(tmp_path, MID_EPOCH)  # last.ckpt of step 15: epoch 1, 7 of its 8 batches processed
    assert seen.batches == [(1, 15, 7)]


def saved_copy(source: Path, target: Path, **changes: Any) -> Path:
    checkpoint = torch.load(source, weights_only=True)
    checkpoint.update(changes)
    torch.save(checkpoint, target)
    return target


def test_checkpoint_of_a_newer_accelkit_is_refused_by_version(tmp_path):
    fit_until(tmp_path / "run", None)
    newer = saved_copy(tmp_path / "run" / "checkpoints" / "last.ckpt", tmp_path / "newer.ckpt",
                       accelkit_version="9.9.0")
    with pytest.raises(ckpt.CheckpointError, match=r"written by accelkit 9\.9\.0, newer than the installed accelkit"):
        fit_from(tmp_path, newer)
    with pytest.raises(ckpt.CheckpointError, match=r"accelkit 9\.9\.0, newer"):
        DropoutNet.load_from_checkpoint(newer)


@pytest.mark.parametrize("changes, named", [
    ({"epoch": "zero"}, "epoch='zero'"),
    ({"loops": "fit_loop"}, "'loops' entry of type str"),
    ({"callbacks": ["x"]}, "'callbacks' entry of type list"),
    ({"loops": {"fit_loop": {"epoch_progress": 3}}}, "Lightning loop states"),
    ({"loops": {"position": {"epoch": "0"}}}, "resume position"),
], ids=["epoch", "loops", "callbacks", "lightning-loops", "position"])
def test_a_changed_layout_is_refused_with_a_sentence(tmp_path, changes, named):
    from helpers.lightning_checkpoints import MID_EPOCH

    changed = saved_copy(MID_EPOCH, tmp_path / "changed.ckpt", **changes)
    with pytest.raises(ckpt.CheckpointError, match=re.escape(named)):
        fit_from(tmp_path, changed)


def test_a_checkpoint_without_an_epoch_is_refused_with_a_sentence(tmp_path):
    from helpers.lightning_checkpoints import MID_EPOCH

    checkpoint = torch.load(MID_EPOCH, weights_only=True)
    del checkpoint["epoch"]
    torch.save(checkpoint, tmp_path / "no-epoch.ckpt")
    with pytest.raises(ckpt.CheckpointError, match="has no 'epoch' entry, so a fit cannot resume from it"):
        fit_from(tmp_path, tmp_path / "no-epoch.ckpt")


# ---------------------------------------------------------------------------------------------- changed data
def checkpointed_epoch_0(root: Path, log: str, samples: int) -> set[int]:
    """The samples of epoch 0 the checkpoint holds as trained: the first ``samples`` the crashed run logged."""
    from helpers.resume_data import trained

    first = trained(root / log)[0][:samples]
    assert len(set(first)) == samples
    return set(first)


@pytest.mark.parametrize("batch_size", [8, 64])
def test_resume_with_another_batch_size_trains_every_other_sample_of_the_epoch_once(tmp_path, batch_size):
    from helpers.resume_data import trained

    indexed_fit(tmp_path, "a.log", stop=7)  # last.ckpt at step 6: batch 6 of 8, 24 of 32 samples
    before = checkpointed_epoch_0(tmp_path, "a.log", 24)
    with pytest.warns(UserWarning, match=rf"{batch_size} sample\(s\) per batch where the checkpoint's run had 4: "
                                         r"the 24 of its 32 samples .* left out and the other 8 are trained"):
        trainer = indexed_fit(tmp_path, "b.log", batch_size=batch_size, ckpt_path="last")
    after = trained(tmp_path / "b.log")
    assert sorted(after[0]) == sorted(set(range(32)) - before)  # 8 samples: none twice, none never
    assert all(sorted(after[e]) == list(range(32)) for e in (1, 2))  # the remaining epochs, whole
    assert trainer.global_step == 6 + 1 + 2 * -(-32 // batch_size)


@pytest.mark.parametrize("size, epoch_0", [(16, 0), (64, 40)], ids=["halved", "doubled"])
def test_resume_with_another_dataset_length_counts_the_samples_trained_and_trains_the_remaining_epochs(
        tmp_path, size, epoch_0):
    from helpers.resume_data import trained

    indexed_fit(tmp_path, "a.log", stop=7)
    said = (r"they cover its 16, so epoch 0 is complete and the run goes on with epoch 1" if epoch_0 == 0 else
            r"each process skips the first 24 sample\(s\) of its share of 64 and trains the other 40")
    with pytest.warns(UserWarning, match=rf"{size} sample\(s\) in the dataset where the checkpoint's run had 32: "
                                         rf"which samples .* cannot be matched .* the 24 sample\(s\) .* {said}"):
        trainer = indexed_fit(tmp_path, "b.log", size=size, ckpt_path="last")
    after = trained(tmp_path / "b.log")
    assert len(after.get(0, [])) == epoch_0 and len(set(after.get(0, []))) == epoch_0
    assert all(sorted(after[e]) == list(range(size)) for e in (1, 2))  # never ends a run that has epochs left
    assert trainer.current_epoch == 3 and trainer.global_step == 6 + epoch_0 // 4 + 2 * size // 4


def test_a_checkpoint_of_an_epoch_resumed_on_other_data_resumes_again_by_samples(tmp_path):
    from helpers.resume_data import trained

    indexed_fit(tmp_path, "a.log", stop=7)  # 24 samples of epoch 0 at batch size 4
    before = checkpointed_epoch_0(tmp_path, "a.log", 24)
    with pytest.warns(UserWarning, match="per batch"):
        indexed_fit(tmp_path, "b.log", batch_size=2, every=7, stop=8, ckpt_path="last")  # checkpoint at step 7
    middle = trained(tmp_path / "b.log")[0][:2]  # its one batch of 2 before that checkpoint
    with pytest.warns(UserWarning, match=r"the 26 of its 32 samples .* left out and the other 6 are trained"):
        indexed_fit(tmp_path, "c.log", ckpt_path="last", every=100)
    after = trained(tmp_path / "c.log")
    assert sorted(before | set(middle) | set(after[0])) == list(range(32)) and len(after[0]) == 6
    assert not (before | set(middle)) & set(after[0])


@pytest.mark.slow
@pytest.mark.parametrize("devices, then, every, samples", [(1, 2, 6, 24), (2, 1, 2, 16)], ids=["1-to-2", "2-to-1"])
def test_resume_on_another_number_of_processes_trains_every_other_sample_once(tmp_path, forked_python, devices, then,
                                                                             every, samples):
    """A fit on ``devices`` processes crashes after a checkpoint; resumed on ``then`` processes, every sample of the
    epoch not trained before the checkpoint is trained once. The two-process runs are ``ddp_fork`` runs (in a process
    forked from the prewarmed interpreter): what is checked (the samples left, the step count, the warning) is
    decided in each worker whichever way it started; ``test_preemption_loop_ddp_spawn_is_bit_identical`` resumes
    spawned workers."""
    from helpers.resume_data import trained

    resumed = forked_python(f"""
        import json
        from helpers.resume_data import resumed_on_other_processes
        print(json.dumps(resumed_on_other_processes({str(tmp_path)!r}, {devices}, {then}, {every})))
        """, path=[Path(__file__).resolve().parent], env={"CUDA_VISIBLE_DEVICES": ""})
    log = [line.split() for line in (tmp_path / "a.log").read_text().splitlines()]
    per_rank = samples // (4 * devices)  # each process's batches before the checkpoint
    before = {int(i) for rank in range(devices) for line in [x for x in log if x[1] == str(rank)][:per_rank]
              for i in line[2:]}
    assert len(before) == samples
    said = resumed["err"]  # the resumed run's standard error
    if then > 1:  # the workers' warnings reach stderr: the resume is described once, by rank 0, not per process
        assert said.count(f"with {then} process(es) where the checkpoint's run had {devices}") == 1, said
    after = trained(tmp_path / "b.log")
    assert sorted(after[0]) == sorted(set(range(32)) - before)  # none twice, none never
    assert all(sorted(after[e]) == list(range(32)) for e in (1, 2))
    assert resumed["current_epoch"] == 3
    assert resumed["global_step"] == every + (32 - samples) // (4 * then) + 2 * 32 // (4 * then)


def damage_record(path: Path, damage: str) -> None:
    """Damage the trained-samples record of the checkpoint at ``path`` (rank 0's mask or the dataset length)."""
    saved = torch.load(path, weights_only=True)
    position = saved["loops"]["position"]
    record = position["ranks"][0]
    if damage.startswith("all bits set"):
        record["seen"] = torch.full_like(record["seen"], 255)
        if damage.endswith("no checksum"):  # as written before records had a checksum and a count with repeats
            record.pop("seen_crc", None), record.pop("drawn", None)
    elif damage == "mask and counts":  # nothing left to count with but the batches the position says were trained
        record["seen"] = torch.full_like(record["seen"], 255)
        record.pop("seen_crc", None)
        record["samples"], record["drawn"] = -5, 10**9
    elif damage == "truncated mask":
        record["seen"] = record["seen"][:2].clone()
    else:
        position["geometry"]["dataset_len"] = 10**12
    torch.save(saved, path)


DAMAGES = {
    "all bits set": r"process 0's mask of the samples trained or its counts do not match the checksum saved with them",
    "all bits set, no checksum": r"process 0's mask of the samples trained marks 32 of 32 samples where its count "
                                 r"says 24",
    "mask and counts": r"process 0's mask of the samples trained marks 32 of 32 samples where its count says -5",
    "truncated mask": r"process 0's mask of the samples trained holds 2 torch.uint8 value\(s\) where a dataset of 32 "
                      r"samples needs 4 bytes",
    "dataset_len=10**12": r"process 0's mask of the samples trained holds 4 torch.uint8 value\(s\) where a dataset of "
                          r"1000000000000 samples needs 125000000000 bytes",
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_trained_samples_record_is_named_and_every_sample_is_trained_once(tmp_path, damage):
    """The record of which samples an epoch trained (a bit mask per process) is checked against its length, its
    count and its checksum; a damaged one is named and the resume counts the samples instead (the same processes:
    the epoch's order is drawn again, so skipping the 24 samples counted leaves exactly the 8 untrained)."""
    from helpers.resume_data import trained

    indexed_fit(tmp_path, "a.log", stop=7)  # last.ckpt at step 6: batch 6 of 8, 24 of 32 samples
    before = checkpointed_epoch_0(tmp_path, "a.log", 24)
    damage_record(tmp_path / "checkpoints" / "last.ckpt", damage)
    with pytest.warns(UserWarning, match=r"8 sample\(s\) per batch where the checkpoint's run had 4: the checkpoint's "
                                         rf"record of the samples trained is damaged \({DAMAGES[damage]}\) and not "
                                         r"used, so the 24 sample\(s\) trained before the checkpoint count against "
                                         r"this epoch: each process skips the first 24 sample\(s\) of its share of "
                                         r"32 and trains the other 8\.") as caught:
        trainer = indexed_fit(tmp_path, "b.log", batch_size=8, ckpt_path="last")
    assert "sample(s) in the dataset" not in " ".join(str(w.message) for w in caught)  # no damaged length quoted
    after = trained(tmp_path / "b.log")
    assert sorted(after[0]) == sorted(set(range(32)) - before)  # none twice, none never
    assert all(sorted(after[e]) == list(range(32)) for e in (1, 2))
    assert trainer.global_step == 6 + 1 + 2 * 4


def test_a_damaged_record_not_needed_for_the_resume_is_named_and_the_resume_is_exact(tmp_path):
    from helpers.resume_data import trained

    indexed_fit(tmp_path, "a.log", stop=7)
    before = checkpointed_epoch_0(tmp_path, "a.log", 24)
    damage_record(tmp_path / "checkpoints" / "last.ckpt", "dataset_len=10**12")
    with pytest.warns(UserWarning, match=r"resuming inside epoch 0: the checkpoint's record of the samples trained is "
                                         r"damaged \(.*1000000000000 samples.*\); it is not needed here: the "
                                         r"processes and the batch size are the checkpoint's, so the run continues "
                                         r"after its 6 batch\(es\)"):
        indexed_fit(tmp_path, "b.log", ckpt_path="last")
    after = trained(tmp_path / "b.log")
    assert sorted(after[0]) == sorted(set(range(32)) - before)


def test_a_sampler_with_replacement_counts_samples_not_distinct_indices(tmp_path):
    """``WeightedRandomSampler(replacement=True)`` repeats indices: 24 samples trained before the checkpoint may be
    fewer distinct ones, and the resumed epoch must skip 24 (the uninterrupted run's last 8 draws follow)."""
    from helpers.resume_data import trained

    (tmp_path / "whole").mkdir()
    indexed_fit(tmp_path / "whole", "log", replacement=True)  # the uninterrupted run
    reference = trained(tmp_path / "whole" / "log")[0]
    indexed_fit(tmp_path, "a.log", stop=7, replacement=True)
    first = trained(tmp_path / "a.log")[0][:24]
    assert first == reference[:24] and len(set(first)) < 24  # repeats: the case where distinct is not samples
    with pytest.warns(UserWarning, match=r"its sampler WeightedRandomSampler cannot leave given samples out, so the "
                                         r"24 sample\(s\) trained before the checkpoint count against this epoch: "
                                         r"each process skips the first 24 sample\(s\) of its share of 32 and trains "
                                         r"the other 8"):
        trainer = indexed_fit(tmp_path, "b.log", batch_size=8, ckpt_path="last", replacement=True)
    assert trained(tmp_path / "b.log")[0] == reference[24:]  # 8 samples: the draws the checkpoint had not reached
    assert trainer.global_step == 6 + 1 + 2 * 4


@pytest.mark.slow
def test_a_sampler_with_replacement_resumed_on_fewer_processes_trains_the_epochs_total(tmp_path, forked_python):
    """Issue 36.5's case: ``WeightedRandomSampler(replacement=True)`` on 2 processes (``ddp_fork``, as the test
    above), resumed on 1: the warning counts the 16 samples trained before the checkpoint, not their distinct
    indices, and the epoch trains its other 16."""
    from helpers.resume_data import trained

    resumed = forked_python(f"""
        import json
        from helpers.resume_data import resumed_on_other_processes
        print(json.dumps(resumed_on_other_processes({str(tmp_path)!r}, 2, 1, 2, replacement=True)))
        """, path=[Path(__file__).resolve().parent, Path(accelkit.__file__).resolve().parents[1]],  # this accelkit
        env={"CUDA_VISIBLE_DEVICES": ""})
    log = [line.split() for line in (tmp_path / "a.log").read_text().splitlines()]
    before = [int(i) for rank in "01" for line in [x for x in log if x[1] == rank][:2] for i in line[2:]]
    assert len(before) == 16 and len(set(before)) < 16  # 2 steps x 4 samples x 2 processes, some repeated
    assert ("the 16 sample(s) trained before the checkpoint count against this epoch: each process skips the first "
            "16 sample(s) of its share of 32 and trains the other 16") in resumed["err"], resumed["err"]
    after = trained(tmp_path / "b.log")
    assert len(after[0]) == 16 and all(len(after[e]) == 32 for e in (1, 2))
    assert resumed["current_epoch"] == 3 and resumed["global_step"] == 2 + 16 // 4 + 2 * 32 // 4


class IndexStream(IterableDataset):
    """The samples of helpers.resume_data.Indexed(32) as a stream, in index order."""

    def __iter__(self):
        from helpers.resume_data import Indexed

        data = Indexed(32)
        return (data[i] for i in range(32))


def test_a_stream_resumed_with_another_batch_size_skips_the_samples_trained_counted_in_its_batches(tmp_path):
    from helpers.resume_data import IndexNet, trained

    class StreamNet(IndexNet):
        def train_dataloader(self) -> Any:
            return DataLoader(IndexStream(), batch_size=self.batch_size)

    def fit(log: str, batch_size: int, stop: int | None, ckpt_path: Any) -> None:
        from helpers.resume_data import StopAfter

        checkpoint = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "checkpoints", every_n_train_steps=6,
                                                        save_last=True, save_top_k=0)
        trainer = accelkit.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False,
                                   enable_model_summary=False, default_root_dir=tmp_path,
                                   callbacks=[checkpoint] + ([StopAfter(stop)] if stop else []))
        try:
            trainer.fit(StreamNet(str(tmp_path / log), 32, batch_size), ckpt_path=ckpt_path)
        except RuntimeError as exc:
            assert "stopped here" in str(exc)

    fit("a.log", 4, 7, None)  # 24 samples of the stream trained at the checkpoint of step 6
    with pytest.warns(UserWarning, match=r"8 sample\(s\) per batch where the checkpoint's run had 4: IndexStream "
                                         r"has no sampler .* the 24 sample\(s\) .* count as 3 batch\(es\) of 8"):
        fit("b.log", 8, None, "last")
    after = trained(tmp_path / "b.log")
    assert after[0] == list(range(24, 32)) and after[1] == list(range(32))


def test_an_epoch_start_looks_at_the_loaders_samplers_once():
    """What an epoch records of its order (``resume.epoch_start``, once per epoch) finds the loader's samplers once
    for both its questions (a stateful user sampler, the generators), not once per question."""
    import sys

    from torch.utils.data import DataLoader, TensorDataset

    from accelkit.loops import resume

    loader = DataLoader(TensorDataset(torch.zeros(10, 2)), batch_size=2, shuffle=True)
    calls: list[str] = []

    def seen(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.endswith("accelkit/loops/resume.py"):
            calls.append(frame.f_code.co_name)

    previous = sys.getprofile()
    sys.setprofile(seen)
    try:
        record = resume.epoch_start(loader)
    finally:
        sys.setprofile(previous)
    assert calls.count("_samplers") == 1, calls
    assert len(record["generators"]) == 0 and record["sampler"] is None  # (a shuffling loader's default order)
