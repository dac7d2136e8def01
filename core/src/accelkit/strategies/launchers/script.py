"""Starting a run's other processes by running the user's script again (:class:`ScriptLauncher`): how
``Fabric(strategy="ddp").launch()`` starts its processes without ``torchrun``, as Lightning's subprocess-script
launcher does.

The first process (rank 0 of its node) starts one child per other local rank, each the same command line with the
ranks in its environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``: a hand-made ``torchrun``-style launch, which the children's composition detects).
The launch is bounded and cleaned up as every accelkit launch:

* a child that dies with a failure is named (rank, pid, exit code or signal) within :data:`WATCH_EVERY_S`, the
  others are stopped and the first process ends with an error;
* a child whose first process is gone (killed with ``-9``) ends itself (:func:`follow_parent`);
* Ctrl-C reaches every process of the terminal's group; a signal sent to the first process alone ends its
  children as it exits; the first process's exit waits a bounded time for its children, then ends them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from accelkit.strategies.launchers.base import Launcher

if TYPE_CHECKING:
    from accelkit.environments.script import ScriptEnvironment
    from accelkit.strategies.base import Strategy

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: the variable telling a child which process started it (it ends itself when that one is gone)
PARENT_ENV = "ACCELKIT_SCRIPT_PARENT"
#: seconds between two looks at the children (and, in a child, at its parent)
WATCH_EVERY_S = 0.5
#: seconds a normal exit of the first process waits for its children to finish
EXIT_WAIT_S = 120.0
#: seconds the first process waits for a failed run's own error to end it before it exits by force
FAILURE_GRACE_S = 5.0


def script_command(argv: list[str] | None = None) -> list[str]:
    """The command line that runs this process's script again: ``python -m pkg.mod ...`` for a module run with
    ``-m``, else ``python /abs/script.py ...``."""
    argv = list(sys.argv if argv is None else argv)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return [sys.executable, "-m", spec.name.removesuffix(".__main__"), *argv[1:]]
    if not argv or not argv[0] or argv[0] == "-c":
        raise RuntimeError("Fabric.launch() starts the other processes by running this script again, but this "
                           f"process runs no script file (sys.argv={argv!r}: an interactive session or `python -c`). "
                           "Save the code as a script, use strategy='ddp_spawn' or 'ddp_fork' with launch(function), "
                           "or start it with torchrun.")
    return [sys.executable, os.path.abspath(argv[0]), *argv[1:]]


class ScriptLauncher(Launcher):
    """Start this node's other ranks by running the script again, then run the work here (as rank
    ``node_rank * processes_per_node``).

    :param environment: the :class:`~accelkit.environments.script.ScriptEnvironment` of the run (its layout and
        rendezvous port).
    """

    def __init__(self, environment: ScriptEnvironment) -> None:
        self.environment = environment
        self.children: list[subprocess.Popen] = []
        self.started = False
        self._failure: str | None = None
        #: whether this process's script has failed (its error is being reported)
        self.main_failed = False
        #: seconds this process's normal exit waits for its children to end by themselves before ending them
        #: (none after this process's script failed: the children would only wait for it in a collective)
        self.wait_at_exit_s = EXIT_WAIT_S

    def child_environment(self, local_rank: int) -> dict[str, str]:
        """The environment of the child of ``local_rank``: this process's, with its place in the run."""
        env = self.environment
        per_node = env.processes_per_node
        child = dict(os.environ)
        child.update({
            "RANK": str(env.node_rank * per_node + local_rank), "WORLD_SIZE": str(env.world_size),
            "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(per_node), "GROUP_RANK": str(env.node_rank),
            "GROUP_WORLD_SIZE": str(env.num_nodes), "NODE_RANK": str(env.node_rank),
            "MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port), PARENT_ENV: str(os.getpid()),
        })
        return child

    def start_children(self) -> None:
        """Start local ranks ``1 .. processes_per_node - 1`` (once) and watch them."""
        if self.started:
            return
        self.started = True
        command = script_command()
        os.environ["MASTER_ADDR"] = self.environment.main_address
        os.environ["MASTER_PORT"] = str(self.environment.main_port)
        for local_rank in range(1, self.environment.processes_per_node):
            self.children.append(subprocess.Popen(command, env=self.child_environment(local_rank)))
        previous_hook = sys.excepthook

        # this process's script failed: its children need not be waited for
        def failed_here(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
            self.wait_at_exit_s = 0.0
            self.main_failed = True  # the watcher no longer interrupts this thread: it is ending already
            try:
                previous_hook(kind, error, trace)
            finally:
                self.name_failed_children(wait_s=2.0)  # a collective fails here when a peer died: say which one

        sys.excepthook = failed_here
        atexit.register(lambda: self.end_children(self.wait_at_exit_s))
        threading.Thread(target=self._watch, name="accelkit-script-children", daemon=True).start()

    def _watch(self) -> None:
        """Until every child has ended: name the first that failed, stop the others, and end this process."""
        while True:
            running = False
            for local_rank, child in enumerate(self.children, start=1):
                code = child.poll()
                if code is None:
                    running = True
                elif code != 0 and self._failure is None:
                    self._fail(local_rank, child, code)
                    return
            if not running:
                return
            time.sleep(WATCH_EVERY_S)

    def name_failed_children(self, wait_s: float = 0.0) -> None:
        """Print one line for the first child that ended with a failure (waiting up to ``wait_s`` for one to), unless
        one was named already."""
        deadline = time.monotonic() + wait_s
        while self._failure is None:
            for local_rank, child in enumerate(self.children, start=1):
                code = child.poll()
                if code is not None and code != 0:
                    self._failure = self.failure_line(local_rank, child, code)
                    print(self._failure, file=sys.stderr, flush=True)
                    return
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def failure_line(self, local_rank: int, child: subprocess.Popen, code: int) -> str:
        """The sentence naming a child that failed: its rank, pid, and exit code or signal."""
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        rank = self.environment.node_rank * self.environment.processes_per_node + local_rank
        return (f"accelkit: the process of rank {rank} (local rank {local_rank}, pid {child.pid}) {how}; stopping "
                "the run's other processes.")

    def _fail(self, local_rank: int, child: subprocess.Popen, code: int) -> None:
        self._failure = self.failure_line(local_rank, child, code)
        print(self._failure, file=sys.stderr, flush=True)
        self.end_children()
        import _thread

        if not self.main_failed:  # (a main thread already in its error report is not interrupted there)
            _thread.interrupt_main()  # ends this process's work at its next Python instruction
        time.sleep(FAILURE_GRACE_S)  # ...or, stuck in a collective that waits for the dead rank, by force
        os._exit(1)

    def end_children(self, wait_s: float = 0.0) -> None:
        """Stop the children still running: ``SIGTERM``, ``SIGKILL`` after 3 s. With ``wait_s``, first give them
        that long to end by themselves."""
        deadline = time.monotonic() + wait_s
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(max(0.0, deadline - time.monotonic()))
        for child in self.children:
            if child.poll() is None:
                child.terminate()
        for child in self.children:
            try:
                child.wait(3.0)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def run_everywhere(self, command: list[str]) -> int:
        """Run ``command`` as every local rank of this node (``accelkit run``: this process is none of them), wait
        for all, and return the exit status: the first failing process's (named, the others stopped), else 0."""
        os.environ["MASTER_ADDR"] = self.environment.main_address
        os.environ["MASTER_PORT"] = str(self.environment.main_port)
        self.children = [subprocess.Popen(command, env=self.child_environment(local_rank))
                         for local_rank in range(self.environment.processes_per_node)]
        try:
            while True:
                codes = [child.poll() for child in self.children]
                failed = next(((i, c) for i, c in enumerate(codes) if c not in (None, 0)), None)
                if failed is not None:
                    self._failure = self.failure_line(failed[0], self.children[failed[0]], failed[1])
                    print(self._failure, file=sys.stderr, flush=True)
                    return failed[1] if failed[1] > 0 else 128 - failed[1]
                if all(c == 0 for c in codes):
                    return 0
                time.sleep(WATCH_EVERY_S)
        finally:
            self.end_children()

    def launch(self, strategy: Strategy, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Start the children, then run ``function`` here (each child runs the same script, so the same call)."""
        self.start_children()
        return function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(processes_per_node={self.environment.processes_per_node})"


def follow_parent(environ: Mapping[str, str] | None = None) -> bool:
    """In a child a :class:`ScriptLauncher` started: watch the process that started it, and end this one (exit
    code 1, a line naming it) when it is gone. Returns whether this process is such a child."""
    environ = os.environ if environ is None else environ
    raw = environ.get(PARENT_ENV)
    if not raw or not raw.isdigit():
        return False
    parent = int(raw)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCH_EVERY_S)
        print(f"accelkit: rank {environ.get('RANK')}: the process that started it (pid {parent}) is gone; "
              "ending.", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="accelkit-script-parent", daemon=True).start()
    return True
