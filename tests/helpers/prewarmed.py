"""Python programs run as ``python script.py args`` runs them, in a process forked from an interpreter that has already
imported torch.

A fresh interpreter spends 3-4 s of CPU importing torch before a test's program does anything (on the 2 cores CI has,
about half of a conformance script's whole cost), and a program that trains spends another 1-2 s when it builds its
first optimizer: ``torch.optim.Optimizer`` imports torch's compile machinery (``torch._dynamo``, sympy), in every
process that builds one (each ``ddp_fork`` worker too, as the caller builds none before the fork). :class:`Prewarmed`
starts one interpreter that imports both and then waits; each :meth:`Prewarmed.run` forks it, and the child becomes the
program: its own process (group), environment, working folder, ``sys.argv``, ``sys.path`` (the script's folder first, or
for ``-m MODULE`` and ``-c CODE`` the working folder, then ``PYTHONPATH``), standard streams and a fresh ``__main__``
module (``__spec__`` None, as for a script, so a ``spawn`` worker re-imports it by path), and it ends as an interpreter
ends: exit status from ``sys.exit`` or 1 with the traceback of an uncaught exception, ``atexit`` handlers run.

What differs from a fresh interpreter, and why it does not matter to the programs run this way: torch (and what it
imports: numpy, the C libraries) and ``torch._dynamo`` were imported before the program ran, reading the environment of
the interpreter that forked (:data:`IMPORT_TIME_VARIABLES`, :data:`IMPORT_TIME_PREFIXES`; :meth:`Prewarmed.run` refuses
a request whose environment sets them otherwise; ``PYTHONWARNINGS`` is applied as start-up applies it), and the output
streams are unbuffered (``PYTHONUNBUFFERED=1``). A program whose subject is interpreter start-up, or importing torch or
its compile machinery (or accelkit, which is imported afresh in every child: the interpreter imports only torch and
``torch._dynamo``), still needs a subprocess.

``Prewarmed(imports=[...])`` imports more modules before it forks, for programs that all import them and whose subject
is not that import (``tests/test_conformance.py`` runs the Lightning side of its side-by-side comparisons on one that
has imported ``lightning.pytorch`` and ``torch_xla``: about 4 CPU-s a program). The environment variables those imports
set are set in each child unless its environment sets them (as a fresh import that sets them only where unset does), and
the run's ``PYTHONWARNINGS`` must be the interpreter's (its filters would otherwise come after the imports' own).

The workers a forked program starts with ``ddp_spawn`` are fresh interpreters (about 3 CPU-s each importing torch),
and stay so: a worker cannot be a fork of this interpreter without changing what the launcher checks. The launcher
knows a worker by the pid of the process ``multiprocessing`` started with ``-c 'from multiprocessing.spawn import
spawn_main; ...'`` (exit status through ``waitpid``, ``SIGTERM``/``SIGKILL``/``SIGCONT`` to it, its stopped state read
in ``/proc/<pid>``), and the worker checks that its parent is the launcher
(``accelkit.strategies.launchers.workers``: ``PR_SET_PDEATHSIG``, then ``os.getppid()`` against
``multiprocessing.parent_process().pid``, exiting at once when they differ). A stand-in executable that asked this
interpreter for a fork would leave that pid to a relay: the forked worker's parent is this interpreter (so it exits
as orphaned), its exit status and stops reach the launcher only through the relay, and a ``SIGKILL`` of the relay
leaves it running, which is what the suite's stopped-rank, interrupt and liveness tests examine. Tests that start
fewer spawned workers (``ddp_fork`` where the claim is not about the spawn start method, one module-scoped launch read
by several tests) are the way to save their cost.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: Variables read when torch and its libraries load (thread pools, allocator), and Python's own start-up ones:
#: a run's environment must agree with the forking interpreter's on them.
IMPORT_TIME_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KMP_AFFINITY",
                         "PYTORCH_CUDA_ALLOC_CONF", "PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONDONTWRITEBYTECODE")

#: Prefixes of the variables torch's compile machinery (dynamo, inductor, AOT autograd, torch's logging) reads when
#: ``torch._dynamo`` is imported: a run's environment must agree with the forking interpreter's on every one set.
IMPORT_TIME_PREFIXES = ("TORCHDYNAMO_", "TORCH_DYNAMO_", "TORCHINDUCTOR_", "INDUCTOR_", "TORCH_COMPILE",
                        "TORCH_LOGS", "TORCH_FAKE_TENSOR", "AOT_", "AOTINDUCTOR_")

#: Variables with those prefixes that torch reads only when it first compiles, not at import: inductor sets
#: ``TORCHINDUCTOR_CACHE_DIR`` itself in a process that compiled (so a test process that ran a compile test
#: passes it on); the forked child gets the run's value in its environment before it compiles anything.
READ_WHEN_COMPILING = ("TORCHINDUCTOR_CACHE_DIR",)

#: Seconds the forking interpreter may take to import what it imports (torch alone takes 3-4 CPU-s; on a loaded
#: machine, several times that in wall time).
START_LIMIT = 600

#: The forking interpreter: it imports torch and ``torch._dynamo`` (and any ``Prewarmed(imports=...)``), answers
#: ``ready 0``, then forks a child per request line on stdin (JSON: argv, cwd, env, stdout, stderr) and answers
#: ``pid <n>`` when the child starts and ``rc <n> <cpu>`` when it has ended (its exit status and the CPU seconds of
#: the child and of what it reaped, which the test's process cannot see). The child falls out of the loop and runs
#: the program in the interpreter's top level, so it exits as an interpreter does.
SERVER = r"""
import json, os, sys, types
import torch  # the import every child saves
import torch._dynamo  # and the one its first torch.optim.Optimizer makes
import importlib

environ = dict(os.environ)
for name in sys.argv[1:]:  # Prewarmed(imports=...): imported once here, for every child
    importlib.import_module(name)
set_by_imports = {k: v for k, v in os.environ.items() if environ.get(k) != v}  # as a fresh import would set them

requests = os.fdopen(os.dup(0), "r")
answers = os.fdopen(os.dup(1), "w", buffering=1)
answers.write("ready 0\n")  # its imports done
base_path = sys.path[1:]  # after '' (the -c program's folder): the standard library and site-packages


def serve():
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        try:
            os.setpgid(pid, pid)  # the child does it too: whichever runs first
        except OSError:
            pass
        answers.write(f"pid {pid}\n")
        _, status, usage = os.wait4(pid, 0)
        answers.write(f"rc {os.waitstatus_to_exitcode(status)} {usage.ru_utime + usage.ru_stime}\n")
    sys.exit(0)


request = serve()
os.setpgid(0, 0)
requests.close()
answers.close()
streams = [os.open(os.devnull, os.O_RDONLY), os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
           os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)]
for fd, stream in enumerate(streams):
    os.dup2(stream, fd)
    os.close(stream)
os.environ.clear()
os.environ.update(request["env"])
for key, value in set_by_imports.items():  # e.g. Lightning's PYTORCH_NVML_BASED_CUDA_CHECK, set unless already set
    os.environ.setdefault(key, value)
import signal  # Ctrl-C as a fresh interpreter started by the requester now takes it: ignored where the requester
signal.signal(signal.SIGINT, signal.SIG_IGN if request["sigint_ignored"] else signal.default_int_handler)  # ignores
import tempfile
tempfile.tempdir = None  # torch's import chose the interpreter's: the program's TMPDIR decides, as at a fresh start
os.chdir(request["cwd"])
for option in request["env"].get("PYTHONWARNINGS", "").split(","):  # read at start-up: applied as Python would
    if option.strip():
        import builtins, re, warnings
        action, message, category, module, lineno = (part.strip() for part in (option.split(":") + [""] * 5)[:5])
        sys.warnoptions.append(option)
        warnings.filterwarnings(action or "default", re.escape(message), getattr(builtins, category or "Warning"),
                                re.escape(module) + r"\Z" if module else "", int(lineno or 0))
if "numpy" in sys.modules:  # its global generator was seeded once, in this interpreter (Python's own reseeds)
    sys.modules["numpy"].random.seed()
extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
if request["argv"][0] == "-m":  # python -m MODULE: the working folder first on the path, argv[0] the module's file
    import runpy
    sys.argv = ["-m", *request["argv"][2:]]
    sys.path[:] = [os.getcwd(), *extra, *base_path]
    runpy.run_module(request["argv"][1], run_name="__main__", alter_sys=True)
    sys.exit(0)
main = types.ModuleType("__main__")
main.__spec__ = None
main.__builtins__ = __builtins__
if request["argv"][0] == "-c":  # python -c CODE: '' (the working folder) first on the path, argv[0] '-c'
    sys.argv = ["-c", *request["argv"][2:]]
    sys.path[:] = ["", *extra, *base_path]
    code = compile(request["argv"][1], "<string>", "exec")
else:
    script = os.path.abspath(request["argv"][0])
    sys.argv = list(request["argv"])
    sys.path[:] = [os.path.dirname(script), *extra, *base_path]
    main.__file__ = script
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec")
sys.modules["__main__"] = main
exec(code, main.__dict__)
"""


_forked_cpu = 0.0
_shared: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...] | None], Prewarmed] = {}


def forked_cpu_seconds() -> float:
    """The CPU seconds of the programs this process's :class:`Prewarmed` interpreters have run and seen end, less
    those of the interpreters this process has since reaped: the forking interpreter reaps its programs, so they
    count among this process's children only once the interpreter itself is reaped (then with the interpreter's
    own). ``helpers.cpu_usage`` adds the difference to the test that ran them, so each second counts once."""
    return _forked_cpu


def _count_forked(seconds: float) -> None:
    global _forked_cpu
    _forked_cpu += seconds


def shared(imports: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Prewarmed:
    """This process's one :class:`Prewarmed` (with ``imports`` and ``env``, if given: one per pair), made at the first
    call (its interpreter starts at its first run): the ``prewarmed`` fixture's, and what a helper that is not a
    fixture uses (``helpers.fixtures.lightning_records``), so that a test process starts one such interpreter, not
    one per user. Ended by :func:`close_shared` at the fixture's tear-down, or when this process exits."""
    key = (tuple(imports), None if env is None else tuple(sorted(env.items())))
    if key not in _shared:
        _shared[key] = Prewarmed(env, imports)
        atexit.register(_shared[key].close)  # a process that never used the fixture (close is idempotent)
    return _shared[key]


def close_shared() -> None:
    """End every interpreter :func:`shared` made (a later call makes a new one)."""
    for interpreter in _shared.values():
        interpreter.close()


class Prewarmed:
    """One interpreter that has imported torch, forked once per :meth:`run`; :meth:`close` ends it."""

    def __init__(self, env: Mapping[str, str] | None = None, imports: Sequence[str] = ()) -> None:
        self.env = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONPATH"}
        self.imports = list(imports)  # imported by the interpreter after torch, for programs that import them all
        self.env["PYTHONUNBUFFERED"] = "1"
        self.proc: subprocess.Popen[bytes] | None = None
        self.pending = b""
        self.reported = 0.0  # CPU seconds of the programs the current interpreter has reported (and reaped)
        self.running: Running | None = None

    def _server(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self._reaped()
            self.proc = subprocess.Popen([sys.executable, "-c", SERVER, *self.imports], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=self.env)
            self.pending = b""
            if self._answer(self.proc, "ready", time.monotonic() + START_LIMIT) is None:
                self.proc.kill()
                raise RuntimeError(f"the prewarmed interpreter did not import {['torch', *self.imports]} within "
                                   f"{START_LIMIT} s")
        return self.proc

    def _answer(self, proc: subprocess.Popen[bytes], kind: str, deadline: float) -> int | None:
        """The next ``kind <n>`` line, or None if ``deadline`` (monotonic) passes first."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the prewarmed interpreter ended (exit {proc.wait()}) instead of answering")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        word, number, *cpu = line.decode().split(" ")
        if word != kind:
            raise RuntimeError(f"the prewarmed interpreter answered {line!r} instead of {kind!r}")
        if cpu:
            self.reported += float(cpu[0])
            _count_forked(float(cpu[0]))
        return int(number)

    def run(self, argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        """Run ``python *argv`` (``argv[0]`` a script, ``-m`` and a module, or ``-c`` and code) in ``cwd`` with
        exactly ``env``, as ``subprocess.run`` with ``capture_output=True, text=True`` does; a run past ``timeout``
        seconds has its process group killed and raises :class:`subprocess.TimeoutExpired`."""
        return self.start(argv, cwd=cwd, env=env).wait(timeout)

    def start(self, argv: Sequence[str], *, cwd: str | os.PathLike[str], env: Mapping[str, str]) -> Running:
        """Start ``python *argv`` as :meth:`run` does, without waiting for its end: the :class:`Running` program
        (its process group's id, its output as written, its end). One program at a time: the next :meth:`start` or
        :meth:`run` comes after its :meth:`Running.wait`."""
        differing = [k for k in IMPORT_TIME_VARIABLES if env.get(k) != self.env.get(k)]
        differing += sorted(k for k in {*env, *self.env} if k.startswith(IMPORT_TIME_PREFIXES) and
                            k not in READ_WHEN_COMPILING and env.get(k) != self.env.get(k))
        if self.imports and env.get("PYTHONWARNINGS", "") != self.env.get("PYTHONWARNINGS", ""):
            differing.append("PYTHONWARNINGS (its filters would come after those of the modules imported before)")
        if differing:
            raise ValueError(f"the run sets {', '.join(differing)} otherwise than the prewarmed interpreter, which "
                             "read them when it imported torch; run this program with subprocess instead")
        if self.running is not None and self.running.poll() is None:  # killed and reaped: later runs can start
            self.running.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.running.wait(60)
            raise RuntimeError(f"{self.running.argv} was still running (now killed): wait() for a started program "
                               "before starting another")
        proc = self._server()
        assert proc.stdin is not None
        folder = tempfile.TemporaryDirectory(prefix="prewarmed-")
        for stream in ("stdout", "stderr"):  # there before the child opens them: Running.lines may read at once
            Path(folder.name, stream).touch()
        request = {"argv": [str(a) for a in argv], "cwd": str(cwd), "env": dict(env),
                   # (inherited at this interpreter's start, perhaps ignored then: e.g. Lightning's Trainer ignores
                   # SIGINT for good in the process that caught a KeyboardInterrupt)
                   "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
                   "stdout": str(Path(folder.name, "stdout")), "stderr": str(Path(folder.name, "stderr"))}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        proc.stdin.flush()
        pid = self._answer(proc, "pid", time.monotonic() + 60)  # the fork itself: an upper bound against a hang
        if pid is None:
            folder.cleanup()
            raise RuntimeError("the prewarmed interpreter did not fork within the time limit")
        self.running = Running(self, proc, list(argv), folder, pid)
        return self.running

    def close(self) -> None:
        """End the interpreter (a run in progress has ended: :meth:`run` waits for it; a started program still
        running, left by a failed test, is killed with its process group rather than left orphaned)."""
        if self.running is not None and self.running.poll() is None:
            self.running.kill()
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._reaped()
            self.proc = None

    def _reaped(self) -> None:
        """The interpreter has been reaped: its programs' CPU now counts among this process's children."""
        _count_forked(-self.reported)
        self.reported = 0.0


class Running:
    """A program :meth:`Prewarmed.start` started: ``pid`` (also its process group's id), its standard output as it
    writes it (:meth:`lines`), signals (:meth:`send_signal`, :meth:`kill`), and its end (:meth:`wait`)."""

    def __init__(self, owner: Prewarmed, server: subprocess.Popen[bytes], argv: list[str],
                 folder: tempfile.TemporaryDirectory[str], pid: int) -> None:
        self.owner, self.server, self.argv, self.folder, self.pid = owner, server, argv, folder, pid
        self.returncode: int | None = None
        self.texts: tuple[str, str] | None = None

    def poll(self) -> int | None:
        """The exit status if the program has ended, else None (as ``Popen.poll``)."""
        if self.returncode is None:
            self.returncode = self.owner._answer(self.server, "rc", time.monotonic())
        return self.returncode

    def lines(self, timeout: float) -> Iterator[str]:
        """The lines of its standard output (unbuffered) as it writes them, each with its newline, until it ends; past
        ``timeout`` seconds its process group is killed and :class:`subprocess.TimeoutExpired` raised."""
        deadline = time.monotonic() + timeout
        pending = b""
        with open(Path(self.folder.name, "stdout"), "rb") as stream:
            while True:
                chunk = stream.read()
                ended = not chunk and self.poll() is not None
                pending += chunk + (stream.read() if ended else b"")
                *complete, pending = pending.split(b"\n")
                yield from (line.decode(errors="replace") + "\n" for line in complete)
                if ended:
                    if pending:
                        yield pending.decode(errors="replace")
                    return
                if not chunk:
                    if time.monotonic() > deadline:
                        self.wait(0)  # kills the group and raises TimeoutExpired
                    time.sleep(0.02)

    def send_signal(self, number: int) -> None:
        """Send signal ``number`` to the program (its process, not its group)."""
        if self.poll() is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        """SIGKILL the program's process group: the program and what it started."""
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(self.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> subprocess.CompletedProcess[str]:
        """Wait for its end and return its exit status and everything it wrote, as ``subprocess.run`` does; past
        ``timeout`` seconds its process group is killed and :class:`subprocess.TimeoutExpired` raised."""
        if self.returncode is None:
            self.returncode = self.owner._answer(self.server, "rc", time.monotonic() + timeout)
            if self.returncode is None:
                self.kill()
                self.returncode = self.owner._answer(self.server, "rc", time.monotonic() + 60)
                out, err = self._texts()
                raise subprocess.TimeoutExpired(self.argv, timeout, out, err)
        out, err = self._texts()
        return subprocess.CompletedProcess([sys.executable, *self.argv], self.returncode, out, err)

    def _texts(self) -> tuple[str, str]:
        """What it wrote to its standard output and error (read once, then its folder removed)."""
        if self.texts is None:
            self.texts = (Path(self.folder.name, "stdout").read_text(errors="replace"),
                          Path(self.folder.name, "stderr").read_text(errors="replace"))
            self.folder.cleanup()
        return self.texts
