"""Distributed runs whose ranks disagree, or whose rank is stopped, end with a message naming the rank, instead
of waiting 30 minutes. Real two-process runs on gloo, each launched from a script's process forked from the prewarmed
interpreter (``helpers.prewarmed``; a wait is bounded by the timeout of the script's run), not from the test's own
process: a forked worker would copy that process's state, its thread pool included.

What these tests check is the same code under ``ddp_spawn`` and ``ddp_fork`` (``accelkit.strategies.launchers``):
the launcher's ``WorkerProcesses`` watches, stops and ends either kind of worker by the pid of the process
``multiprocessing`` started, and the watchdog, the collective timeout and the loop's checks (a ``None`` step, uneven
batch counts) run in the workers. What the start method changes is that process: a fresh interpreter (spawn) or a
copy of the launching script's process (fork, which drops the launcher's ``atexit`` handlers and inherits its signal
handlers, both reset by the worker). So one stopped-rank run stays ``ddp_spawn`` (a stopped spawned interpreter is
named, ended and leaves nothing running), and the others run ``ddp_fork``, whose workers start in a fraction of a
second instead of importing torch and accelkit again (about 3 CPU-s each)."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import accelkit
from accelkit.errors import ConfigurationError
from accelkit.strategies.launchers import watchdog
from helpers.guards import child_env, descendants, wait_gone
from helpers.prewarmed import Prewarmed

HELPER = Path(__file__).parent / "helpers" / "stall_fit.py"


def _run(tmp_path: Path, mode: str, prewarmed: Prewarmed, strategy: str) -> subprocess.CompletedProcess:
    """``stall_fit.py``'s ``mode`` as a program, forked from the prewarmed interpreter, its workers started by
    ``strategy``."""
    return prewarmed.run([str(HELPER), str(tmp_path), mode, "12", strategy], cwd=tmp_path, env=child_env(),
                         timeout=300)


@pytest.mark.slow
def test_a_stuck_rank_fails_the_run_at_the_collective_timeout_naming_it(tmp_path, prewarmed):
    # in a script's process: the run's timeout bounds the test if the collective timeout ever failed to end it;
    # ddp_fork: the watchdog and the collective timeout are the workers' own, whichever way they started
    done = _run(tmp_path, "stuck", prewarmed, "ddp_fork")
    assert done.returncode != 0
    # the watchdog's diagnosis (printed when the wait passes a tenth of the timeout, and attached to the error)
    assert "rank 1 is behind (not in a collective)" in done.stderr, done.stderr[-3000:]
    assert "rank 1: step 1, batch 1, in training_step" in done.stderr
    assert "rank 0: step 1, batch 1, in backward" in done.stderr
    assert "collective_timeout" in done.stderr


@pytest.mark.slow
def test_none_from_training_step_on_one_rank_fails_at_once_with_the_reason(tmp_path, prewarmed):
    # ddp_fork: the check is the training loop's, in each worker, whichever way it started
    done = _run(tmp_path, "none", prewarmed, "ddp_fork")
    assert done.returncode != 0, done.stderr[-3000:]
    assert "training_step returned None on rank 1 (batch 1, step 1) in a run of 2 processes" in done.stderr, \
        done.stderr[-3000:]


@pytest.mark.slow
def test_uneven_batch_counts_run_the_smallest_count_on_every_rank_and_say_so(tmp_path, prewarmed):
    # ddp_fork: the ranks agree on the count in the loop, in each worker, whichever way it started
    done = _run(tmp_path, "uneven", prewarmed, "ddp_fork")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "different numbers of batches per rank (from 3 to 4; this rank 4): every rank runs 3" in done.stderr
    assert "done global_step=6" in done.stdout  # 2 epochs x 3 batches: the caller's trainer, from rank 0's result
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    for name, value in ranks[0]["state_dict"].items():
        assert torch.equal(value, ranks[1]["state_dict"][name]), name


def test_the_fit_imported_here_leaves_no_top_level_helper_module():
    # importing helpers.stall_fit in a test's process (for make_trainer, Disagreeing) once put tests/helpers on
    # sys.path and imported helpers/models.py as a top-level 'models', which a later test's own models.py then
    # could not replace
    import helpers.stall_fit  # noqa: F401

    folder = Path(__file__).resolve().parent / "helpers"
    assert not [entry for entry in sys.path if entry and Path(entry).resolve() == folder]
    assert not [name for name, module in list(sys.modules.items()) if name != "helpers" and "." not in name
                and Path(getattr(module, "__file__", None) or "/").resolve().parent == folder]


@pytest.mark.parametrize("value", [0, -1, "5", float("nan"), True])
def test_a_bad_collective_timeout_is_refused_naming_it(value, tmp_path):
    with pytest.raises(ConfigurationError, match="collective_timeout="):
        accelkit.Trainer(accelerator="cpu", devices=1, collective_timeout=value, default_root_dir=tmp_path)


def test_the_collective_timeout_reaches_the_strategy(tmp_path):
    from datetime import timedelta

    trainer = accelkit.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn",
                               collective_timeout=timedelta(minutes=2), default_root_dir=tmp_path)
    assert trainer.strategy.collective_timeout_s == 120.0
    assert accelkit.Trainer(accelerator="cpu", devices=1, default_root_dir=tmp_path).strategy.collective_timeout_s \
        == 600.0


def _stop_rank(tmp_path: Path, rank: int, prewarmed: Prewarmed, strategy: str,
               collective_timeout: int = 12) -> tuple[int, str, int, list[int]]:
    """Run ``stall_fit.py stop<rank>`` (forked from the prewarmed interpreter, its workers started by ``strategy``),
    SIGSTOP that rank where it waits at step 4 and let the run end (within the collective timeout and a bounded
    margin: the run's timeout). Returns (exit status, stderr, the stopped pid, every process the run had started
    that is still alive 10 s after it ended).

    The collective timeout (12 s) leaves room for what the tests read: the stopped rank is stopped about 3 s after
    the other entered the collective, so when the collective fails its last report is about 9 s old, past the
    watchdog's ``SILENT_AFTER_S`` (5 s) that makes it "stopped reporting"."""
    run = prewarmed.start([str(HELPER), str(tmp_path), f"stop{rank}", str(collective_timeout), strategy],
                          cwd=tmp_path, env=child_env())
    try:
        marker, deadline = tmp_path / f"stopme-{rank}", time.monotonic() + 240
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), "the rank never reached step 4"
        time.sleep(0.2)  # the pid is written
        pid, started = int(marker.read_text()), descendants(run.pid)
        time.sleep(2.5)  # what the rank is doing reaches the others (its watchdog reports once a second)
        os.kill(pid, signal.SIGSTOP)
        done = run.wait(timeout=collective_timeout + 60)
    finally:
        if run.poll() is None:  # the run's process group (the script and its workers), the stopped one included
            run.kill()
            run.wait(timeout=60)
    return done.returncode, done.stderr, pid, wait_gone(started)


@pytest.mark.slow
def test_a_stopped_rank_0_ends_the_run_naming_it_and_leaves_nothing_running(tmp_path, prewarmed):
    # rank 0 keeps the store the watchdogs talk through: the others' diagnosis used to wait on it for ever.
    # ddp_fork: the store, the diagnosis and the launcher's end of a stopped worker do not depend on how it started
    code, err, pid, left = _stop_rank(tmp_path, 0, prewarmed, "ddp_fork")
    assert code != 0, err[-3000:]
    assert left == [], f"processes {left} outlived the run"
    assert "WorkerError" in err, err[-3000:]
    assert f"worker 0 (pid {pid}) is stopped (SIGSTOP or SIGTSTP) after step 4 (ended with the others)" in err
    # rank 1's diagnosis is skipped, saying why, instead of blocking
    assert "the run's store, kept by rank 0's process, does not answer" in err, err[-3000:]
    assert "The diagnosis was skipped" in err
    assert "different collectives" not in err and "stopped reporting" not in err


@pytest.mark.slow
def test_a_stopped_rank_1_is_named_with_the_step_it_stopped_at(tmp_path, prewarmed):
    # ddp_spawn: the one stopped-rank run whose stopped worker is a fresh interpreter (ddp_fork's: rank 0's above)
    code, err, pid, left = _stop_rank(tmp_path, 1, prewarmed, "ddp_spawn")
    assert code != 0, err[-3000:]
    assert left == [], f"processes {left} outlived the run"
    assert f"worker 1 (pid {pid}) is stopped (SIGSTOP or SIGTSTP) after step 4 (ended with the others)" in err
    # rank 0's diagnosis of the failed collective: what was observed, the right step, no invented cause
    failure = [line for line in err.splitlines() if "when the collective failed, rank 0 had waited" in line]
    assert len(failure) == 1, err[-3000:]
    assert "rank 1 stopped reporting" in failure[0]
    assert (f"(its process {pid} is stopped: SIGSTOP or SIGTSTP); its last one: step 4, batch 4, in training_step"
            in failure[0])
    assert "rank 0: step 4, batch 4, in backward" in failure[0]
    assert "different" not in failure[0] and "in setup" not in failure[0]


@pytest.fixture
def store():
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5))


def _publish(store, rank: int, note: tuple) -> None:
    import json

    store.set(f"accelkit/watchdog/{rank}", json.dumps(note))


def test_a_diagnosis_of_an_immediate_failure_says_how_long_the_rank_waited(store):
    now = time.time()
    _publish(store, 1, (4, 4, "backward", now, now, os.getpid(), "elsewhere"))
    watchdog.mark("backward", 4, 4)
    text = watchdog.Watchdog(store, 0, 2, timeout_s=1200, warn_after_s=120).diagnose(failed=True)
    assert text.startswith("when the collective failed, rank 0 had waited 0 s in backward: every rank is in "
                           "backward at the same step"), text
    assert "no progress" not in text and "120 s" not in text


def test_a_rank_that_stopped_reporting_is_named_not_blamed_on_different_collectives(store):
    now = time.time()
    _publish(store, 1, (0, -1, "setup", now - 30, now - 20, 1, "elsewhere"))  # its last report, 20 s ago
    watchdog.mark("backward", 4, 4)
    text = watchdog.Watchdog(store, 0, 2, timeout_s=20, warn_after_s=10).diagnose()
    assert "rank 1 stopped reporting" in text, text
    assert "rank 1: no report for 20 s (process 1 on elsewhere); its last one: step 0, batch -1, in setup" in text
    assert "different" not in text


def test_a_failure_in_a_rank_s_own_work_gets_no_diagnosis(store):
    watchdog.start(store, 0, 2, timeout_s=20)
    try:
        watchdog.mark("training_step", 3, 3)
        error = ValueError("the user's own bug")
        watchdog.explain(error)
        assert not getattr(error, "__notes__", None)
        watchdog.mark("reduce")
        error = RuntimeError("Connection closed by peer")
        watchdog.explain(error)
        assert "when the collective failed, rank 0 had waited 0 s in reduce: rank 1 never reported" in \
            error.__notes__[0], error.__notes__
    finally:
        watchdog.stop()


def test_a_training_step_reads_backward_while_its_backward_pass_runs(store):
    # the loop notes one phase per step; the backward pass (where DDP waits for the others' gradients) is seen on
    # the training thread's stack, without a note of its own
    dog = watchdog.Watchdog(store, 0, 2, timeout_s=20, warn_after_s=10)
    seen = []

    class Look(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            seen.append(dog.own_note()[:3])
            return grad

    watchdog.mark_step(7, 3)
    assert dog.own_note()[:3] == (7, 3, "training_step")
    Look.apply(torch.ones(2, requires_grad=True)).sum().backward()
    assert seen == [(7, 3, "backward")]
    assert dog.own_note()[:3] == (7, 3, "training_step")  # past its backward: the step's own work again


def test_a_collective_failing_in_backward_gets_the_diagnosis(store):
    class LostPeer(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("Connection closed by peer")

    watchdog.start(store, 0, 2, timeout_s=20)
    try:
        watchdog.mark_step(3, 3)
        with pytest.raises(RuntimeError) as failed:
            LostPeer.apply(torch.ones(2, requires_grad=True)).sum().backward()
        watchdog.explain(failed.value)
        assert "when the collective failed, rank 0 had waited 0 s in backward: rank 1 never reported" in \
            failed.value.__notes__[0], failed.value.__notes__
    finally:
        watchdog.stop()


def test_a_distributed_run_notes_one_phase_per_step_and_none_around_backward(store, tmp_path):
    """The training loop notes each step (its step and batch, ``training_step``) through ``watchdog.mark_step``,
    once per batch, and nothing else per step (the backward pass is seen from the stack, without a note)."""
    from helpers.models import RegressionModule, quiet_trainer

    calls = collections.Counter()
    notes: list[tuple] = []
    dog: Any = None

    class Notes(RegressionModule):
        def training_step(self, batch, batch_idx):
            notes.append(dog.own_note(backward=False)[:3])  # what the watchdog's thread reads during the step
            return super().training_step(batch, batch_idx)

    def trace(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == watchdog.__file__:
            calls[frame.f_code.co_name] += 1

    dog = watchdog.start(store, 0, 2, timeout_s=20)  # what a distributed run's worker has: the loop notes its phases
    trainer = quiet_trainer(tmp_path, max_steps=6, enable_model_summary=False, limit_val_batches=0)
    sys.settrace(trace)
    try:
        trainer.fit(Notes())
    finally:
        sys.settrace(None)
        watchdog.stop()
    assert trainer.global_step == 6
    assert notes == [(step, step % 4, "training_step") for step in range(6)], notes
    assert calls["mark_step"] == len(notes), calls
    assert calls["mark"] == 0, calls


LATE_STORE = Path(__file__).parent / "helpers" / "late_store.py"


@pytest.fixture
def late_store():
    """A store kept by a process of its own that the test can stop and resume: (port, that process)."""
    server = subprocess.Popen([sys.executable, str(LATE_STORE), "server"], stdout=subprocess.PIPE, text=True,
                              env=child_env())
    try:
        yield int(server.stdout.readline()), server
    finally:
        server.kill()
        server.wait(timeout=60)
        server.stdout.close()


def test_stopping_the_watchdog_waits_for_a_store_call_given_up_on(late_store):
    """A store that answers late (its process stopped, resumed 1 s after the read was given up on): the
    diagnosis's read is given up on after STORE_TIMEOUT_S while its call still runs; stop() waits for that call (up
    to SETTLE_S), so none is left to return while the interpreter shuts down - which aborts a Python 3.11 process
    ("terminate called without an active exception"): a finished elastic worker died that way and its job
    restarted."""
    import threading
    from datetime import timedelta

    import torch.distributed as dist

    from helpers.late_store import calls_running

    port, server = late_store
    # the client's own time-out well past STORE_TIMEOUT_S (5 s): at an equal 5 s the C++ call could give up first
    # and return, and the bounded call then never gave up (a fresh clone's fast tier failed so once)
    client = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dog = watchdog.start(client, 0, 2, timeout_s=60)
    os.kill(server.pid, signal.SIGSTOP)
    resume = threading.Timer(1.0, os.kill, (server.pid, signal.SIGCONT))
    try:
        with pytest.raises(watchdog.StoreNotAnswering, match="did not answer within 5 s"):
            dog.notes()
        assert calls_running() == 1  # given up on, still under way
        resume.start()
    finally:
        watchdog.stop()
        resume.cancel()
        os.kill(server.pid, signal.SIGCONT)
    assert calls_running() == 0


def test_a_process_that_exits_without_stopping_the_watchdog_still_waits_for_its_store_calls(late_store):
    port, server = late_store
    try:
        done = subprocess.run([sys.executable, str(LATE_STORE), "exit", str(port), str(server.pid)],
                              capture_output=True, text=True, env=child_env(), timeout=120)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["calls running after the read was given up on: 1",
                                        "calls running at exit: 0"], (done.stdout, done.stderr)
    assert "terminate called" not in done.stderr
