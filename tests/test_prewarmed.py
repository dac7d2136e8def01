"""``helpers.prewarmed``: a program forked from an interpreter that has imported torch runs as ``python script.py``
runs it (the conformance scripts run this way), a run past its time limit is ended with what it started, and a
started program is read as it writes, signalled and killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from helpers.guards import pid_alive, wait_gone
from helpers.prewarmed import Prewarmed

pytestmark = pytest.mark.slow  # starts an interpreter that imports torch, and forks it


def write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def test_a_forked_program_runs_as_a_fresh_interpreter_runs_it(tmp_path: Path, prewarmed: Prewarmed) -> None:
    write(tmp_path, "beside.py", "WHERE = 'beside the script'\n")
    script = write(tmp_path, "program.py", '''
        import atexit, json, multiprocessing, os, sys, tempfile
        import beside

        class Record:
            pass

        def report(queue):
            queue.put(type(Record()).__module__)

        if __name__ == "__main__":
            atexit.register(print, "atexit ran")
            context = multiprocessing.get_context("spawn")  # re-imports this script by its path
            queue = context.Queue()
            worker = context.Process(target=report, args=(queue,))
            worker.start()
            print(json.dumps({"argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(), "beside": beside.WHERE,
                              "env": os.environ.get("ONLY_HERE"), "spawned": queue.get(),
                              "torch": "torch" in sys.modules, "dynamo": "torch._dynamo" in sys.modules,
                              "torch_xla": sorted(m for m in sys.modules if m.split(".")[0] == "torch_xla"),
                              "tmp": tempfile.gettempdir()}))
            worker.join()
            sys.exit(int(sys.argv[1]))
    ''')
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "ONLY_HERE": "yes", "TMPDIR": str(tmp_path / "tmp")}
    done = prewarmed.run([str(script), "3"], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 3, done.stderr
    first, last = done.stdout.splitlines()
    assert last == "atexit ran"
    assert json.loads(first) == {"argv": [str(script), "3"], "path0": str(tmp_path), "cwd": str(tmp_path),
                                 "beside": "beside the script", "env": "yes", "spawned": "__mp_main__", "torch": True,
                                 "dynamo": True,  # what a program's first optimizer imports: 1-2 CPU-s it saves
                                 "torch_xla": [],  # helpers.xla forks XLA programs from it: they import torch_xla
                                 "tmp": str(tmp_path / "tmp")}  # the program's TMPDIR, not the one torch's import saw

    write(tmp_path, "as_module.py", "import json, sys\nprint(json.dumps([sys.argv, sys.path[0], __name__]))\n")
    done = prewarmed.run(["-m", "as_module", "x"], cwd=tmp_path, env=env, timeout=300)  # python -m as_module x
    assert json.loads(done.stdout) == [[str(tmp_path / "as_module.py"), "x"], str(tmp_path), "__main__"], done.stderr

    code = "import json, sys, as_module\nprint(json.dumps([sys.argv, sys.path[0], __name__]))"
    done = prewarmed.run(["-c", code, "y"], cwd=tmp_path, env=env, timeout=300)  # python -c CODE y
    assert done.stdout.splitlines()[-1] == json.dumps([["-c", "y"], "", "__main__"]), done.stderr

    warn = "import warnings\nwarnings.warn('shown unless ignored', UserWarning)\nprint('done')"
    assert "UserWarning: shown unless ignored" in prewarmed.run(["-c", warn], cwd=tmp_path, env=env, timeout=300).stderr
    for ignoring in ("ignore", "ignore::UserWarning", "default,ignore:shown unless"):  # as Python reads -W options
        done = prewarmed.run(["-c", warn], cwd=tmp_path, env={**env, "PYTHONWARNINGS": ignoring}, timeout=300)
        assert (done.stdout, done.stderr) == ("done\n", ""), (ignoring, done.stderr)

    failing = write(tmp_path, "failing.py", "raise ValueError('the bad value')\n")
    done = prewarmed.run([str(failing)], cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 1 and done.stderr.rstrip().endswith("ValueError: the bad value"), done.stderr

    refused = {**env, "OMP_NUM_THREADS": str(int(env.get("OMP_NUM_THREADS", "1")) + 1)}
    with pytest.raises(ValueError, match="sets OMP_NUM_THREADS otherwise than the prewarmed interpreter"):
        prewarmed.run([str(failing)], cwd=tmp_path, env=refused, timeout=300)
    compile_setting = {**env, "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}  # read when torch._dynamo is imported
    with pytest.raises(ValueError, match="sets TORCHINDUCTOR_MAX_AUTOTUNE otherwise than the prewarmed interpreter"):
        prewarmed.run([str(failing)], cwd=tmp_path, env=compile_setting, timeout=300)
    # inductor sets TORCHINDUCTOR_CACHE_DIR itself in a process that compiled, and reads it only when compiling:
    # a test process that ran a compile test passes it on, and the child runs with the run's value
    cache = {**env, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}
    done = prewarmed.run(["-c", "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"], cwd=tmp_path, env=cache,
                         timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == str(tmp_path / "inductor-cache"), done.stderr


def test_a_run_past_its_limit_is_killed_with_the_processes_it_started(tmp_path: Path, prewarmed: Prewarmed) -> None:
    pids = tmp_path / "pids"
    script = write(tmp_path, "stuck.py", f'''
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print("started", flush=True)
        time.sleep(600)
    ''')
    with pytest.raises(subprocess.TimeoutExpired) as stopped:  # 10 s: the fork prints "started" well within it
        prewarmed.run([str(script)], cwd=tmp_path, env=dict(os.environ), timeout=10)
    assert stopped.value.stdout == "started\n"
    program, child = (int(pid) for pid in pids.read_text().split())
    assert not pid_alive(program)
    assert wait_gone([child], 30) == []
    done = prewarmed.run([str(write(tmp_path, "after.py", "print('next')\n"))], cwd=tmp_path, env=dict(os.environ),
                         timeout=300)
    assert (done.returncode, done.stdout) == (0, "next\n")


def test_a_started_program_is_read_line_by_line_signalled_and_killed(tmp_path: Path, prewarmed: Prewarmed) -> None:
    ticking = write(tmp_path, "ticking.py", '''
        import itertools, time
        for n in itertools.count():
            print(f"tick {n}")
            time.sleep(0.05)
    ''')
    env = dict(os.environ)
    # a fresh interpreter takes Ctrl-C as the process starting it leaves it: this test's process may have been left
    # ignoring it (Lightning's Trainer ignores SIGINT for good in a process where it caught a KeyboardInterrupt)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _signalled_and_killed(prewarmed, ticking, tmp_path, env)
    finally:
        signal.signal(signal.SIGINT, previous)


def _signalled_and_killed(prewarmed: Prewarmed, ticking: Path, tmp_path: Path, env: dict[str, str]) -> None:
    running = prewarmed.start([str(ticking)], cwd=tmp_path, env=env)
    for line in running.lines(timeout=120):
        if line == "tick 3\n":
            running.send_signal(signal.SIGINT)  # Ctrl-C: KeyboardInterrupt, as in a fresh interpreter
            break
    done = running.wait(60)
    assert done.returncode != 0 and done.stderr.rstrip().endswith("KeyboardInterrupt"), done.stderr
    assert done.stdout.startswith("tick 0\ntick 1\ntick 2\ntick 3\n"), done.stdout

    running = prewarmed.start([str(ticking)], cwd=tmp_path, env=env)
    assert next(iter(running.lines(timeout=120))) == "tick 0\n"
    with pytest.raises(RuntimeError, match=r"was still running \(now killed\)"):  # one program at a time
        prewarmed.start([str(ticking)], cwd=tmp_path, env=env)
    assert running.returncode == -signal.SIGKILL

    own = Prewarmed()  # closed with a program still running (as a failed test leaves it): the program is killed
    left = own.start([str(ticking)], cwd=tmp_path, env=env)
    assert next(iter(left.lines(timeout=120))) == "tick 0\n"
    own.close()
    assert wait_gone([left.pid], 30) == []

    short = write(tmp_path, "short.py", "print('one')\nprint('two', end='')\n")
    running = prewarmed.start([str(short)], cwd=tmp_path, env=env)
    assert list(running.lines(timeout=120)) == ["one\n", "two"]  # to its end, the last line without a newline
    assert running.wait(60).returncode == 0


def test_a_program_started_where_ctrl_c_is_ignored_ignores_it_as_a_fresh_interpreter(tmp_path: Path,
                                                                                     prewarmed: Prewarmed) -> None:
    """A fresh interpreter inherits an ignored SIGINT from the process starting it (and then installs no
    KeyboardInterrupt handler); a forked program follows the requesting process's disposition at its start, not the
    one the forking interpreter inherited when it started."""
    ticking = write(tmp_path, "ticking.py", '''
        import itertools, time
        for n in itertools.count():
            print(f"tick {n}")
            time.sleep(0.05)
    ''')
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        running = prewarmed.start([str(ticking)], cwd=tmp_path, env=dict(os.environ))
    finally:
        signal.signal(signal.SIGINT, previous)
    lines = iter(running.lines(timeout=120))
    assert next(lines) == "tick 0\n"
    running.send_signal(signal.SIGINT)
    assert [next(lines) for _ in range(5)][-1] == "tick 5\n" and running.poll() is None  # still ticking
    running.kill()
    assert running.wait(60).returncode == -signal.SIGKILL
