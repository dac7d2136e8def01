"""Scaffolding shared by the Fabric conformance scripts, not part of what a Fabric user writes.

Every script in this folder is a small program in the style of Lightning's ``examples/fabric``, written so that it
runs unchanged on Lightning Fabric and on accelkit's: ``FRAMEWORK=lightning`` in the environment makes it import
``lightning.fabric``; anything else (the default) makes it import ``accelkit``. Each script prints its final metrics
from rank zero as ``METRIC <name>=<value>`` lines (``tests/test_fabric_conformance.py`` compares them between the two
frameworks), and every process prints ``CONFORMANCE OK <name> rank=<rank>`` when it has finished.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

FRAMEWORKS = ("accelkit", "lightning")
FRAMEWORK = os.environ.get("FRAMEWORK", "accelkit")
if FRAMEWORK not in FRAMEWORKS:
    raise SystemExit(f"FRAMEWORK={FRAMEWORK!r} is not one of {FRAMEWORKS}: say which Fabric the script imports.")
LIGHTNING = FRAMEWORK == "lightning"


def parse_args(description: str) -> argparse.Namespace:
    """The options every Fabric conformance script takes: the Fabric's arguments and an output folder."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--root", default=None, help="output folder, the same for every process (default: a new one)")
    args = parser.parse_args()
    # the launched processes re-run the script with the same arguments: the caller's folder reaches them by name
    root = args.root or os.environ.get("FABRIC_CONFORMANCE_ROOT") or tempfile.mkdtemp(prefix="fabric-conformance-")
    os.environ["FABRIC_CONFORMANCE_ROOT"] = root
    args.root = str(Path(root).resolve())
    return args


def fabric_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The Fabric's constructor arguments taken from the command line."""
    return {"accelerator": args.accelerator, "devices": args.devices, "strategy": args.strategy,
            "precision": args.precision}


def report(fabric: Any, **metrics: float) -> None:
    """Print the final metrics from rank zero, one ``METRIC name=value`` line each, in full precision."""
    for name, value in metrics.items():
        fabric.print(f"METRIC {name}={float(value)!r}\n", end="")  # one write: lines of processes do not mix


def expect(condition: bool, message: str) -> None:
    """``assert`` that survives ``python -O``."""
    if not condition:
        raise AssertionError(message)


def ok(name: str, fabric: Any) -> None:
    """The line the test looks for, once per process (the program's last act)."""
    print(f"CONFORMANCE OK {name} rank={fabric.global_rank}\n", end="", flush=True)
    if LIGHTNING:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            # Lightning Fabric 2.6.6 leaves its gloo group to the interpreter's exit, where it now and then aborts a
            # process whose program has finished ('terminate called without an active exception', SIGABRT: seen
            # in a full run of the suite); accelkit's Fabric ends its group itself when the run ends
            dist.destroy_process_group()
