"""SIGINT/SIGTERM stop a run at a consistent step, save it and say how to resume; a second signal stops at once;
no temporary folder outlives its run. Real processes and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from accelkit.strategies.launchers import interrupt
from accelkit.strategies.launchers.in_place import InPlaceLauncher
from accelkit.strategies.launchers.spawn import SpawnLauncher, remove_stale_temp_dirs
from helpers.models import RegressionModule, quiet_trainer, regression_data
from helpers.prewarmed import Prewarmed, Running

HELPER = Path(__file__).parent / "helpers" / "interrupt_fit.py"


def left_behind(tmp: Path) -> list[Path]:
    """What the run left in its temporary folder, less torch's own compile caches (``torchinductor_<user>``, which
    torch 2.11 creates there on import and keeps on purpose, across runs)."""
    return [p for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]


def _start(tmp_path: Path, devices: int, prewarmed: Prewarmed, slow_s: float = 0.05, **extra: str) -> Running:
    """``interrupt_fit.py`` as a program forked from the prewarmed interpreter (its temporary files under
    ``tmp_path/tmp``; ``extra``: more environment variables)."""
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), SLOW_S=str(slow_s), **extra)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return prewarmed.start([str(HELPER), str(tmp_path / "run"), str(devices)], cwd=tmp_path, env=env)


def _wait_for_step(running: Running, step: int) -> set[int]:
    """Read ``step N PID`` lines until step ``step``; return the pids that printed (the training processes)."""
    pids = set()
    for line in running.lines(timeout=120):
        if line.startswith("step "):
            _, number, pid = line.split()
            pids.add(int(pid))
            if int(number) >= step:
                return pids
    raise AssertionError(f"the run ended before step {step}: {running.wait(0).stderr[-2000:]}")


def _gone(pids: set[int]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in
                 (Path(f"/proc/{p}/status").read_text() if Path(f"/proc/{p}/status").exists() else "")]
        if not alive:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow
# one process (in place) is covered by tests/test_exact_resume.py's SIGINT test, which also resumes from it. SIGINT
# and SIGTERM take the same path (one handler for both, accelkit.strategies.launchers.interrupt): SIGINT stops spawned
# workers (the default strategy of 2 devices), SIGTERM forked ones (ddp_fork, the same launcher and stop protocol),
# so that the SIGTERM run does not start 2 more fresh worker interpreters
@pytest.mark.parametrize("devices, sig, strategy", [(2, signal.SIGINT, "ddp_spawn"), (2, signal.SIGTERM, "ddp_fork")])
def test_a_signal_to_the_caller_stops_every_process_after_one_step_and_saves_it(tmp_path, devices, sig, strategy,
                                                                                prewarmed):
    running = _start(tmp_path, devices, prewarmed, STRATEGY=strategy)
    pids = _wait_for_step(running, 3)
    assert len(pids) == (1 if devices == 1 else 2)
    running.send_signal(sig)  # to the calling process only, as `kill -INT <pid>` does
    done = running.wait(120)
    out, err = done.stdout, done.stderr
    assert done.returncode != 0
    name = signal.Signals(sig).name
    assert f"{name} stopped training at epoch" in err and "Resume with trainer.fit(model, ckpt_path=" in err, err
    saved = tmp_path / "run" / "checkpoints" / "interrupted.ckpt"
    checkpoint = torch.load(saved, weights_only=True)
    # every process stopped after the same step: the last step printed is the saved one
    printed = [int(line.split()[1]) for line in out.splitlines() if line.startswith("step ")]
    assert checkpoint["global_step"] == max(printed) >= 3
    if devices > 1:
        last_by_pid: dict[str, int] = {}
        for line in out.splitlines():
            if line.startswith("step "):
                last_by_pid[line.split()[2]] = int(line.split()[1])
        assert set(last_by_pid.values()) == {checkpoint["global_step"]}, last_by_pid
    assert _gone(pids), "a worker outlived the interrupted run"
    assert left_behind(tmp_path / "tmp") == [], "a temporary folder outlived the run"


@pytest.mark.slow
@pytest.mark.parametrize("devices", [1, 2])
def test_a_second_signal_stops_at_once_without_saving(tmp_path, devices, prewarmed):
    running = _start(tmp_path, devices, prewarmed, slow_s=3600)  # a step sleeps an hour: only a second signal ends it
    pids = _wait_for_step(running, 1)
    running.send_signal(signal.SIGINT)
    time.sleep(1.0)
    running.send_signal(signal.SIGINT)
    done = running.wait(120)  # bounded, far below the hour a step sleeps
    err = done.stderr
    assert done.returncode != 0
    assert "press Ctrl-C again to stop at once" in err
    assert not (tmp_path / "run" / "checkpoints" / "interrupted.ckpt").exists()
    assert _gone(pids)
    assert left_behind(tmp_path / "tmp") == []


def test_the_grace_after_a_first_signal_fits_in_a_schedulers_30_s_pre_emption_grace():
    # one value for both launchers (documented in docs/topology.rst), with time left to exit before a SIGKILL
    assert InPlaceLauncher.grace_s == SpawnLauncher.grace_s == interrupt.STOP_GRACE_S <= 15


@pytest.mark.slow
def test_sigterm_while_the_first_step_compiles_stops_within_the_grace_without_saving(tmp_path, prewarmed):
    """compile_step=True, one process: SIGTERM while torch.compile compiles the first step (a cold compile: the
    inductor cache is in the run's own temporary folder) ends the run when the grace (1 s here) runs out, not when
    the compilation ends; the error names the signal, the grace and the compilation, and nothing is saved."""
    running = _start(tmp_path, 1, prewarmed, COMPILE_STEP="1", GRACE_S="1")
    for line in running.lines(timeout=120):
        if line.startswith("batch 0 "):
            break
    else:
        raise AssertionError(f"the run ended before its first batch: {running.wait(0).stderr[-2000:]}")
    running.send_signal(signal.SIGTERM)
    done = running.wait(120)  # bounded: the generous limit of the subprocess, far above the grace
    err = done.stderr
    assert done.returncode != 0
    assert "SIGTERM: the run did not reach the end of a step within 1 s of the signal (it was compiling the step " \
           "with torch.compile), so it was stopped there; nothing was saved" in err, err[-3000:]
    # the stop is the error the program ends with, though torch's compiler, cut short, raises another on its way out
    assert err.strip().splitlines()[-1].startswith("accelkit.errors.TrainingInterrupted: SIGTERM: "), err[-3000:]
    assert "step " not in done.stdout  # the compiled step never ran
    assert not (tmp_path / "run" / "checkpoints" / "interrupted.ckpt").exists()


def test_stale_result_folders_of_dead_launchers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f"accelkit-spawn-{dead_pid}-abc"
    ours = tmp_path / f"accelkit-xla-{os.getpid()}-def"
    foreign = tmp_path / "accelkit-spawn-notapid"
    for folder in (stale, ours, foreign):
        folder.mkdir()
        (folder / "result.pt").write_bytes(b"x")
    removed = remove_stale_temp_dirs(str(tmp_path))
    assert removed == [stale] and not stale.exists()
    assert ours.exists() and foreign.exists()


def test_torchs_own_cache_folder_is_not_a_leftover_but_a_run_folder_is(tmp_path):
    (tmp_path / "torchinductor_root").mkdir()
    assert left_behind(tmp_path) == []
    (tmp_path / "accelkit-spawn-123-abc").mkdir()
    assert [p.name for p in left_behind(tmp_path)] == ["accelkit-spawn-123-abc"]


def test_a_worker_s_step_report_is_one_store_into_the_shared_block_with_no_python_frame():
    from accelkit.strategies.launchers import interrupt

    control = interrupt.StopControl(interrupt.shared_block(2), index=1)
    frames = []
    sys.settrace(lambda frame, event, arg: frames.append(frame.f_code.co_name))
    try:
        control.report(7)  # what the training loop calls after every batch
    finally:
        sys.settrace(None)
    assert frames == []
    assert (control.step_of(0), control.step_of(1)) == (0, 7)
    control.request(signal.SIGTERM, workers=2)
    assert not control.due(8) and control.due(9)  # two steps past the furthest worker


def test_the_training_loop_asks_whether_a_stop_is_due_only_once_one_was_requested(tmp_path):
    """After every batch the loop reads the shared block (``pending``, no Python frame) and calls
    ``StopControl.due`` only when a stop was requested: a run without a signal never enters it."""
    from accelkit.strategies.launchers import interrupt

    control = interrupt.StopControl(interrupt.shared_block(1))
    frames = []
    sys.settrace(lambda frame, event, arg: frames.append(frame.f_code.co_name))
    try:
        assert control.pending() == 0
    finally:
        sys.settrace(None)
    assert frames == []
    control.request(signal.SIGTERM)
    assert control.pending() == 1 and control.due(0)

    due_calls = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is interrupt.StopControl.due.__code__:
            due_calls.append(frame.f_locals["global_step"])

    trainer = quiet_trainer(tmp_path, max_epochs=2)
    sys.setprofile(profile)
    try:
        trainer.fit(RegressionModule(), train_dataloaders=DataLoader(regression_data(16), batch_size=4))
    finally:
        sys.setprofile(None)
    assert trainer.global_step == 8 and due_calls == []
