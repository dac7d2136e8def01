"""Real XLA work for the core's and the plugins' tests, always in a fresh interpreter.

XLA runs on the host CPU through PJRT (``PJRT_DEVICE=CPU``, ``CPU_NUM_DEVICES`` devices). torch_xla is never
imported in the pytest process: importing it sets ``PJRT_DEVICE`` there (which steers ``accelerator="auto"`` to
XLA in every later test), and a runtime started in the parent breaks every later spawn.

* :func:`xla_env`: the environment of such a subprocess.
* :func:`run_scenario`: run ``python SCRIPT NAME OUTDIR`` (a scenario file that writes ``OUTDIR/result.json``)
  and return what it measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def run_scenario(script: Path, name: str, out: Path, devices: int = 1, timeout: float = 180, **env: str) -> dict:
    """Run scenario ``name`` of ``script`` in a fresh interpreter with :func:`xla_env` (``devices`` XLA devices,
    ``env`` on top) and return the ``result.json`` it wrote into ``out``; a failed run fails the test with the
    ends of its output."""
    proc = subprocess.run([sys.executable, str(script), name, str(out)], env=xla_env(devices, **env),
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads((out / "result.json").read_text())
