"""``accelkit run``: start a Fabric script on this node's processes (Lightning's ``fabric run``).

    accelkit run --accelerator cpu --devices 2 --strategy ddp train.py --epochs 3

The run is composed here as the script's :class:`~accelkit.Fabric` will compose it (same plugins, same checks), then
the script is started once per process of this node with its rank in the environment (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``..., as ``torchrun`` sets them); the script need not call ``fabric.launch()``. The options reach each
process's ``Fabric(...)`` through ``ACCELKIT_FABRIC_*`` variables
(:data:`accelkit.fabric.fabric.COMMAND_LINE_SETTINGS`): an argument the script gives
that disagrees with one of them is refused, naming both. The first process that fails is named and the others are
stopped; the exit status is the failing one's.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelkit.strategies.launchers.script import ScriptLauncher

from accelkit.fabric.fabric import COMMAND_LINE_SETTINGS as SETTINGS


def parser() -> argparse.ArgumentParser:
    """The options of ``accelkit run``; the script's own arguments follow its path."""
    p = argparse.ArgumentParser(prog="accelkit run", description="Start a Fabric script on this node's processes "
                                "(Lightning's `fabric run`): the script need not call fabric.launch().")
    p.add_argument("--accelerator", default=None, help="cpu, or any accelerator a plugin provides (default: auto)")
    p.add_argument("--strategy", default=None, help="ddp, fsdp... (default: auto)")
    p.add_argument("--devices", default=None, help="how many devices (processes) on this node, or which ones")
    p.add_argument("--num-nodes", "--num_nodes", dest="num_nodes", type=int, default=None, help="machines taking part")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0, help="this machine's index")
    p.add_argument("--main-address", "--main_address", dest="main_address", default="127.0.0.1",
                   help="the host of node 0, where the processes meet")
    p.add_argument("--main-port", "--main_port", dest="main_port", type=int, default=None,
                   help="the port they meet on (default: a free one, which a single node needs)")
    p.add_argument("--precision", default=None, help="32-true, bf16-mixed, 16-mixed...")
    p.add_argument("script", help="the Python script to run")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def run_command(words: list[str]) -> int:
    """``accelkit run [OPTIONS] SCRIPT [ARGS...]``: compose the run, start the script on every process of this node,
    wait for all of them; returns the exit status."""
    args = parser().parse_args(words)
    if not os.path.isfile(args.script):
        raise SystemExit(f"accelkit run: {args.script!r} is not a file; give the path of a Python script")
    settings = {name: getattr(args, name) for name in SETTINGS if getattr(args, name) is not None}
    os.environ["NODE_RANK"] = str(args.node_rank)
    os.environ["MASTER_ADDR"] = args.main_address
    if args.main_port is not None:
        os.environ["MASTER_PORT"] = str(args.main_port)
    launcher = _compose(settings)
    for name, value in settings.items():
        os.environ[SETTINGS[name]] = str(value)
    command = [sys.executable, os.path.abspath(args.script), *args.script_args]
    return launcher.run_everywhere(command)


def _compose(settings: dict[str, Any]) -> ScriptLauncher:
    """Compose the run from ``settings`` as a Fabric does; return the launcher that starts its processes."""
    from accelkit.errors import ConfigurationError
    from accelkit.fabric.fabric import DEFAULTS, compose_fabric
    from accelkit.plugins.manager import PluginManager
    from accelkit.strategies.launchers.script import ScriptLauncher

    composition = compose_fabric(PluginManager(), [], [], **{**DEFAULTS, **settings})
    strategy = composition.strategy
    launcher = strategy.launcher
    if launcher.launches_workers:
        raise ConfigurationError(f"accelkit run: strategy {strategy.name!r} starts its own processes from a "
                                 "function (fabric.launch(function)); run the script with python, or use "
                                 "--strategy ddp")
    if not isinstance(launcher, ScriptLauncher):  # one process (or a launcher such as srun started this one)
        from accelkit.environments.script import ScriptEnvironment

        environment = ScriptEnvironment()
        environment.plan(1, 1)
        return ScriptLauncher(environment)
    return launcher
