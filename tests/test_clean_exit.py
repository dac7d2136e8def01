"""A completed ddp_spawn run exits 0, every time (issue 17, item 5, the ddp_spawn part).

The cause: a spawned worker ended through the interpreter's own teardown while native threads were still
running in it. ``destroy_process_group`` leaves the process-group backend alive (torch keeps a reference once
``torch._dynamo`` was imported, which DDP does), so gloo's worker threads and the rendezvous store's thread run on
until the process exits; a native thread that re-enters Python during the teardown (releasing a tensor that a
collective held, coming back from a store call) ends the process with ``terminate called without an active
exception`` (SIGABRT, exit 134) after the run succeeded. It was rare (the README saw it in about one full suite
in three). A worker now ends with :func:`accelkit.strategies.launchers.workers.end_process`: the exit steps that
matter to the user (non-daemon threads joined, atexit handlers, streams flushed), then ``os._exit``.

The first test makes the moment certain (a thread in and out of native code while the teardown deletes an object
slowly): the worker aborted with SIGABRT every time before the fix. The second runs a complete user script
(fit, validate, test, predict: four launches of two workers) through ``benchmarks/exit_codes.py`` and counts
non-zero exits. One run, not more: the first test is what catches the abort (every time); a run of the whole
script checks that each stage's workers end through the same clean exit, and a second run of it would only add
a second draw of an abort that was rare (about one full suite in three), for the cost of eight more worker
starts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.guards import REPO, TESTS, child_env  # noqa: E402

pytestmark = pytest.mark.slow


def test_a_worker_with_a_thread_in_native_code_at_its_end_exits_cleanly(tmp_path, prewarmed):
    # the launching script forked from the prewarmed interpreter; the workers whose end is checked are spawned
    proc = prewarmed.run([str(TESTS / "helpers" / "native_thread_fit.py"), str(tmp_path)], cwd=tmp_path,
                         env=child_env(), timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "DONE 4" in proc.stdout
    assert "terminate called" not in output and "SIGABRT" not in output, output[-3000:]


def test_complete_ddp_spawn_runs_exit_0(tmp_path, prewarmed):
    runs = 1
    # the benchmark's driver forked from the prewarmed interpreter: it runs each user script in a fresh interpreter
    proc = prewarmed.run([str(REPO / "benchmarks" / "exit_codes.py"), "--kind", "ddp_spawn", "--runs", str(runs),
                          "--timeout", "240"], cwd=tmp_path, env=child_env(), timeout=600)
    assert f"ddp_spawn: 0 of {runs} runs failed" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == 0
