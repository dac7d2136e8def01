"""Restarts that resume, as a tested promise (issue 17, item 9): a run under ``torchrun --max-restarts`` with
periodic checkpoints and ``ckpt_path="last"`` ends bit-identical to a run never stopped, after torchrun restarted
it when a worker was killed mid-epoch, and after the job was then stopped with SIGTERM and the same command was run
again (a preemptible cluster's requeue): one job goes through both. Two CPU processes over gloo; see
docs/resume.rst."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelkit  # noqa: E402
from helpers.guards import PYTHON, TESTS, child_env  # noqa: E402
from helpers.resume_fit import DropoutNet, make_trainer  # noqa: E402

SCRIPT = TESTS / "helpers" / "torchrun_resume_fit.py"
START = re.compile(r"^rank (\d+) pid (\d+) attempt (\S+) starts at step (\d+)$")
STEPS_PER_EPOCH = 6  # 48 samples, batches of 4, 2 ranks; 3 epochs; a checkpoint every 4 steps


def torchrun(root: Path, step_sleep_s: float, restarted_rank_1_delay_s: float = 0.0) -> subprocess.Popen:
    """Start the helper fit under ``torchrun --standalone --nproc-per-node 2 --max-restarts 2`` in its own process
    group; its standard error goes to ``root.stderr``."""
    env = child_env()
    env["STEP_SLEEP_S"] = str(step_sleep_s)
    env["RESTARTED_RANK_1_DELAY_S"] = str(restarted_rank_1_delay_s)
    root.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             "--max-restarts", "2", str(SCRIPT), str(root)], env=env, stdout=subprocess.PIPE,
                            stderr=open(root.with_suffix(".stderr"), "w"), text=True, start_new_session=True)


def kill_run(proc: subprocess.Popen) -> None:
    """Kill torchrun's process group and every worker of the run: torchrun starts each worker in a session of its
    own, so a worker left behind by a torchrun that died would keep the output pipe open (and the test waiting)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    script, root = str(SCRIPT).encode(), str(proc.args[-1]).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if script in cmdline and root in cmdline:
                os.kill(int(entry.name), signal.SIGKILL)


def follow(proc: subprocess.Popen, on_line=None, timeout: float = 300.0) -> list[str]:
    """Read the run's lines until it ends (``on_line(line, lines)`` sees each); after ``timeout`` kill the run, its
    workers included (the test then fails on what it read)."""
    timer = threading.Timer(timeout, lambda: kill_run(proc))
    timer.start()
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if on_line is not None:
                on_line(lines[-1], lines)
        proc.wait(timeout=60)
    finally:
        timer.cancel()
        if proc.poll() is None:
            kill_run(proc)
            proc.wait(timeout=30)
        proc.stdout.close()
    return lines


def starts(lines: list[str]) -> list[tuple[int, int, str, int]]:
    """``(rank, pid, attempt, step)`` of every ``... starts at step`` line."""
    return [(int(m[1]), int(m[2]), m[3], int(m[4])) for m in map(START.match, lines) if m]


def steps_after(lines: list[str], index: int) -> list[int]:
    return [int(line.split()[1]) for line in lines[index:] if line.startswith("step ")]


def stderr_of(root: Path) -> str:
    return root.with_suffix(".stderr").read_text()[-4000:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, torch.Tensor]:
    """The final weights of the same command never stopped."""
    root = tmp_path_factory.mktemp("torchrun") / "reference"
    proc = torchrun(root, 0.0)
    lines = follow(proc)
    assert proc.returncode == 0 and "done" in lines, stderr_of(root)
    return torch.load(root / "final.pt", weights_only=True)


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_a_killed_worker_is_restarted_then_sigterm_and_the_same_command_again_resume_exactly(tmp_path, reference):
    """Both promises in one job (three process starts fewer than a job each): torchrun restarts the workers after
    rank 1 is killed inside an epoch, and they resume at the last periodic checkpoint; then torchrun itself gets
    SIGTERM during that restarted attempt (a preemption notice), and the same command run again resumes from the
    newest checkpoint. The final weights equal those of the command never stopped: a step lost or trained twice
    by either resume would change them."""
    root = tmp_path / "run"
    killed: list[int] = []
    stopped: list[int] = []

    def disrupt(line: str, lines: list[str]) -> None:
        if not line.startswith("step "):
            return
        step = int(line.split()[1])
        if not killed and step >= 9:  # epoch 1, batch 3
            pid = next(pid for rank, pid, attempt, _ in starts(lines) if rank == 1 and attempt == "0")
            os.kill(pid, signal.SIGKILL)
            killed.append(step)
        in_restart = any((m := START.match(text)) and m[3] == "1" for text in lines)
        if in_restart and not stopped and step >= 14:  # in the restarted attempt: epoch 2, batch 2
            proc.send_signal(signal.SIGTERM)  # to torchrun only, as a scheduler's preemption notice
            stopped.append(step)

    proc = torchrun(root, 0.2, restarted_rank_1_delay_s=3.0)
    first = follow(proc, disrupt)
    assert killed and killed[0] % STEPS_PER_EPOCH != 0, killed  # the worker died inside an epoch
    restarted = [(rank, step) for rank, _, attempt, step in starts(first) if attempt == "1"]
    assert sorted(rank for rank, _ in restarted) == [0, 1], first  # torchrun restarted both workers once
    resumed_at = restarted[0][1]
    assert {step for _, step in restarted} == {resumed_at} and resumed_at % 4 == 0 and resumed_at >= 8, restarted
    first_restart_line = next(i for i, line in enumerate(first) if (m := START.match(line)) and m[3] == "1")
    assert steps_after(first, first_restart_line)[0] == resumed_at + 1  # the last periodic checkpoint, no batch twice
    assert stopped and proc.returncode != 0 and "done" not in first, (stopped, first[-5:], stderr_of(root))
    again = torchrun(root, 0.0)  # the same command again (a requeued job)
    lines = follow(again)
    assert again.returncode == 0 and "done" in lines, stderr_of(root)
    resumed = {step for _, _, _, step in starts(lines)}
    assert len(resumed) == 1, resumed
    # from a checkpoint the restarted attempt wrote (past the one it resumed from), none beyond its last step
    assert resumed_at < next(iter(resumed)) <= max(steps_after(first, first_restart_line)), (resumed, first[-5:])
    assert steps_after(lines, 0)[0] == next(iter(resumed)) + 1
    assert same_weights(reference, torch.load(root / "final.pt", weights_only=True))


def test_the_first_attempt_names_the_folder_of_the_users_checkpoint_callback(tmp_path):
    trainer = make_trainer(tmp_path / "root", epochs=1, every=100)
    folder = tmp_path / "root" / "checkpoints"  # make_trainer's ModelCheckpoint(dirpath=...)
    mine = accelkit.callbacks.ModelCheckpoint(dirpath=tmp_path / "mine", save_last=True)
    trainer_elsewhere = accelkit.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                                         enable_model_summary=False, default_root_dir=tmp_path / "default",
                                         callbacks=[mine])
    assert trainer_elsewhere.checkpoint_path == (tmp_path / "mine" / "last.ckpt").resolve()
    assert trainer.checkpoint_path == folder.resolve() / "last.ckpt"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer_elsewhere.fit(DropoutNet(), ckpt_path="last")
    said = [str(w.message) for w in caught if "ckpt_path='last'" in str(w.message)]
    assert len(said) == 1 and str((tmp_path / "mine").resolve()) in said[0], said
    assert str(tmp_path / "default") not in said[0]
    assert (tmp_path / "mine" / "last.ckpt").is_file()  # where the next attempt finds it


def test_without_a_checkpoint_callback_the_warning_says_there_is_nothing_to_resume(tmp_path):
    trainer = accelkit.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                               enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.warns(UserWarning, match="no checkpoint callback"):
        trainer.fit(DropoutNet(), ckpt_path="last")
