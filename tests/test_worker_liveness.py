"""A dead worker is noticed within seconds whatever the size of what the workers receive, one signal ends a
launch whose workers never started (issue 17, item 6), and a worker stopped too long ends its launch (issue 23,
item 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accelkit.errors import WorkerError  # noqa: E402
from accelkit.strategies.launchers.workers import WorkerProcesses  # noqa: E402
from helpers.guards import PYTHON, TESTS, child_env, idle_worker, native_crash_worker, wait_gone  # noqa: E402

SCRIPT = TESTS / "helpers" / "never_starts_fit.py"
pytestmark = pytest.mark.slow


def test_a_worker_dying_while_importing_the_script_fails_the_launch_with_a_worker_error(tmp_path, prewarmed):
    # 400,000 rows travel to each worker; the launcher used to block for ever writing them to a dead worker.
    # The launching script is forked from the prewarmed interpreter; its spawned workers import it again by path.
    proc = prewarmed.run([str(SCRIPT), str(tmp_path), "raise"], cwd=tmp_path, env=child_env(), timeout=120)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    caught = [line for line in proc.stdout.splitlines() if line.startswith(("CAUGHT", "NO ERROR"))]
    assert caught == ["CAUGHT accelkit.errors.WorkerError"], proc.stdout + proc.stderr[-3000:]
    assert "before it started the run" in proc.stdout and "__main__" in proc.stdout, proc.stdout
    # the worker's own traceback reached the terminal
    assert "RuntimeError: this script refuses to be imported by a worker process" in proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_one_signal_ends_a_launch_whose_workers_never_started(tmp_path, sig):
    proc = subprocess.Popen([PYTHON, str(SCRIPT), str(tmp_path), "hang"], env=child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 100
        while len(list(tmp_path.glob("importing-*"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = [int(p.name.split("-")[1]) for p in tmp_path.glob("importing-*")]
        assert len(workers) == 2, "the workers did not begin importing the script"
        proc.send_signal(sig)  # one signal, to the launching process only
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    name = signal.Signals(sig).name
    assert proc.returncode == 3, out[-3000:] + err[-3000:]
    assert "CAUGHT accelkit.errors.TrainingInterrupted" in out, out + err[-3000:]
    assert f"{name}: the workers were stopped at once (they had not started the run yet)" in out, out
    assert wait_gone(workers) == [], f"workers {workers} outlived the stopped launch"
    assert not any(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"accelkit-spawn-{proc.pid}-*"))


def test_a_worker_stopped_past_the_launch_s_limit_ends_the_launch_naming_it(tmp_path):
    workers = WorkerProcesses(tmp_path, stopped_limit_s=1.0)
    workers.start(idle_worker, (600,), 2)
    try:
        deadline = time.monotonic() + 100
        while not workers.started() and time.monotonic() < deadline:
            workers.poll(0.2)
        pid = workers.processes[1].pid
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(WorkerError, match=rf"^worker 1 \(pid {pid}\) is stopped \(SIGSTOP or SIGTSTP\) for \d+ s, "
                                              r"past the launch's limit \(1 s"):
            while not workers.poll(0.2) and time.monotonic() < deadline:
                pass
    finally:
        workers.kill()  # the stopped worker is continued, so SIGTERM ends it
    assert wait_gone([p.pid for p in workers.processes]) == []


def test_a_worker_crashed_in_native_code_names_the_python_line_that_called_it(tmp_path):
    workers = WorkerProcesses(tmp_path)
    workers.start(native_crash_worker, (600,), 2)
    try:
        deadline = time.monotonic() + 100
        with pytest.raises(WorkerError) as caught:
            while not workers.poll(0.2) and time.monotonic() < deadline:
                pass
    finally:
        workers.kill()
    text = str(caught.value)
    assert text.startswith("worker 1 was killed by SIGSEGV without a Python exception"), text
    assert "the stack of each of its threads at the crash (faulthandler)" in text, text
    # the Python line that called the crashing native code, in the worker's own file
    assert 'File "' + str(TESTS / "helpers" / "guards.py") + '"' in text and "in native_crash_worker" in text, text
    assert wait_gone([p.pid for p in workers.processes]) == []


def test_the_spawn_launchers_start_outside_a_launch_says_so():
    # start() runs the workers launch() prepares (their folder, the shared block): alone it names what to call
    from accelkit.strategies.launchers.spawn import SpawnLauncher

    with pytest.raises(RuntimeError, match=r"SpawnLauncher.start\(\) runs inside launch\(\), which sets up the "
                                           r"workers; call launch\(\) instead"):
        SpawnLauncher(1).start(print, (), 1)


def test_telling_a_stopped_worker_leaves_no_file_open():
    # the launcher asks this of each worker while it waits; an unclosed /proc file was a ResourceWarning per
    # worker and poll in a user's run under `-W always` (OML's DDP script printed dozens)
    import warnings

    from accelkit.utilities.processes import process_stopped

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert process_stopped(os.getpid()) is False
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [str(w.message) for w in caught]
