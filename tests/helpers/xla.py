"""Real XLA work for the core's and the plugins' tests, always in a process of its own.

XLA runs on the host CPU through PJRT (``PJRT_DEVICE=CPU``, ``CPU_NUM_DEVICES`` devices). torch_xla is never
imported in the pytest process: importing it sets ``PJRT_DEVICE`` there (which steers ``accelerator="auto"`` to
XLA in every later test), and a runtime started in the parent breaks every later spawn. A scenario's process may be
forked from the ``prewarmed`` interpreter (``helpers.prewarmed``): it has imported torch and ``torch._dynamo`` only,
never torch_xla, run no backward and started no runtime, so the program meets XLA as a fresh interpreter does
(torch_xla first imported by the program itself, after whatever the program ran on the CPU before).

* :func:`xla_env`: the environment of such a subprocess.
* :func:`run_program`: run ``python ARGV`` forked from the prewarmed interpreter, or fresh.
* :func:`run_scenario`: run ``python SCRIPT NAME OUTDIR`` (a scenario file that writes ``OUTDIR/result.json``)
  and return what it measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.prewarmed import Prewarmed

#: Variables of a real TPU host or a user's shell that would change what a CPU run resolves to.
FOREIGN = ("XRT_TPU_CONFIG", "TPU_NUM_DEVICES", "TPU_WORKER_HOSTNAMES", "TPU_WORKER_ID",
           "ACCELKIT_DISABLE_PLUGIN_AUTOLOAD")


def xla_env(devices: int | None = 1, unset: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """This process's environment for an XLA-on-CPU subprocess: plugins discovered as installed, ``devices``
    host-CPU XLA devices (``None``: ``CPU_NUM_DEVICES`` unset, torch_xla's default), the names in ``unset``
    removed, then ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN and k not in unset}
    env.update({"PJRT_DEVICE": "CPU", "PYTHONUNBUFFERED": "1"})
    if devices is None:
        env.pop("CPU_NUM_DEVICES", None)
    else:
        env["CPU_NUM_DEVICES"] = str(devices)
    env.update(extra)
    return env


def run_program(argv: list[str], env: dict[str, str], timeout: float,
                prewarmed: Prewarmed | None = None) -> subprocess.CompletedProcess[str]:
    """``python *argv`` with ``env`` in this process's working folder: forked from ``prewarmed`` if given, else in a
    fresh interpreter (for a program whose subject is interpreter start-up, or that needs Python options)."""
    if prewarmed is not None:
        return prewarmed.run(argv, cwd=os.getcwd(), env=env, timeout=timeout)
    return subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def run_scenario(script: Path, name: str, out: Path, devices: int = 1, timeout: float = 180,
                 prewarmed: Prewarmed | None = None, **env: str) -> dict:
    """Run scenario ``name`` of ``script`` with :func:`xla_env` (``devices`` XLA devices, ``env`` on top) as
    :func:`run_program` does and return the ``result.json`` it wrote into ``out``; a failed run fails the test with
    the ends of its output."""
    proc = run_program([str(script), name, str(out)], xla_env(devices, **env), timeout, prewarmed)
    assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads((out / "result.json").read_text())
