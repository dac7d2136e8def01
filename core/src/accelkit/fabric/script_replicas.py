"""``Fabric.launch()`` without a function on a strategy that starts its workers from a function (XLA's replicas):
the launching process starts the workers with :func:`run_script`, which runs the script file again as ``__main__``
in each of them; the script's own ``Fabric(...)`` there adopts the worker's run (:func:`current`) and its
``launch()`` returns at once, so the code after ``launch()`` runs once per worker and never in the launching
process, which waits for the workers and exits with their status.

Workers may be threads of one process (PJRT on a host CPU runs one thread per device): what a worker knows of its
script run is kept per thread, and the script runs in a namespace of its own rather than through
``sys.modules["__main__"]``, which every thread shares.
"""

from __future__ import annotations

import builtins
import contextlib
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.fabric.fabric import Fabric

_local = threading.local()


def current() -> Fabric | None:
    """The set-up Fabric of the script run in this worker thread (what :func:`run_script` was given), or ``None``
    outside one."""
    return getattr(_local, "fabric", None)


def at_end(function: Callable[[], object]) -> None:
    """Call ``function`` when this worker's script run ends (a worker process may end without running ``atexit``
    handlers: a multiprocessing child leaves through ``os._exit``); outside a script run, at interpreter exit."""
    ends = getattr(_local, "at_end", None)
    if ends is None:
        import atexit

        atexit.register(function)
    else:
        ends.append(function)


def script_path(strategy_name: str) -> str:
    """The file of the running script (``__main__`` of ``python script.py``). A program without one (an interactive
    session, a notebook, ``python -c``) or run as a module (``python -m NAME``, ``pytest``: its file is not the
    user's script) gets a :class:`TypeError` naming ``launch(function)``."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        problem = f"this program runs as the module {spec.name!r} (python -m), not as a script file"
    elif not path or not Path(path).is_file():
        problem = "this program has no script file (an interactive session, a notebook or python -c)"
    else:
        return str(Path(path).resolve())
    raise TypeError(f"Fabric(strategy={strategy_name!r}).launch() without a function runs the script file again in "
                    f"each worker (python script.py), but {problem}: call fabric.launch(function) with a function "
                    "taking the Fabric as its first argument")


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """While workers start: a blank ``__main__``, so that a ``spawn`` start method does not import the script in
    the new process as ``__mp_main__`` (which would run its top level, ``launch()`` included, outside any worker);
    :func:`run_script` runs it there instead."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def run_script(fabric: Fabric, path: str) -> None:
    """What each worker runs: the script at ``path`` as ``__main__`` (in a namespace of its own), with ``fabric``
    (set up for this worker) adopted by the script's ``Fabric(...)``. A ``sys.exit`` with a status other than 0
    is raised as an error naming it."""
    code = compile(Path(path).read_bytes(), path, "exec")
    namespace: dict[str, object] = {"__name__": "__main__", "__file__": path, "__builtins__": builtins,
                                 "__package__": None, "__spec__": None, "__loader__": None, "__cached__": None}
    _local.fabric, _local.at_end = fabric, []
    try:
        exec(code, namespace)  # noqa: S102 - the user's own script, run again in this worker as the launch asked
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise RuntimeError(f"the script {path} exited with status {exc.code!r} in worker "
                               f"{fabric.global_rank}") from None
    finally:
        ends = _local.at_end
        _local.fabric, _local.at_end = None, None
        for function in ends:
            function()
