"""``accelkit checkpoint``: work with checkpoints from the command line.

    accelkit checkpoint consolidate checkpoints/epoch=2-step=300.ckpt model.ckpt

``consolidate`` turns a sharded checkpoint directory (written by a sharding strategy such as ``fsdp``, at any
world size) into one ordinary checkpoint file, readable with ``torch.load(path, weights_only=True)``, by
``Module.load_from_checkpoint`` and as ``ckpt_path`` of any strategy. It needs no process group and no model.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``accelkit checkpoint``: the action (``consolidate``) and its paths."""
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    consolidate = actions.add_parser(
        "consolidate", help="write a sharded checkpoint directory as one checkpoint file",
        description="Write the sharded checkpoint directory DIR as one ordinary checkpoint file OUT (full tensors on "
                    "the CPU; loads with torch.load(OUT, weights_only=True)).")
    consolidate.add_argument("directory", metavar="DIR", help="a sharded checkpoint directory")
    consolidate.add_argument("output", metavar="OUT", help="the checkpoint file to write (e.g. model.ckpt)")
    consolidate.add_argument("--force", action="store_true", help="overwrite OUT if it exists")


def checkpoint_command(args: argparse.Namespace) -> int:
    """``accelkit checkpoint consolidate DIR OUT``: write a sharded checkpoint directory as one file."""
    from accelkit.checkpoint import sharded as dcp_io

    if args.action != "consolidate":  # pragma: no cover - argparse allows only the listed actions
        raise SystemExit(f"accelkit checkpoint: unknown action {args.action!r}")
    source, output = Path(args.directory), Path(args.output)
    if not dcp_io.is_sharded_checkpoint(source):
        dcp_io.check_complete(source)  # part of a sharded checkpoint: the missing file is named
        what = "does not exist" if not source.exists() else (
            "is a file, already one checkpoint" if source.is_file() else
            f"is a directory without {dcp_io.METADATA_FILE} and .metadata (not a complete sharded checkpoint)")
        raise SystemExit(f"accelkit checkpoint consolidate: {str(source)!r} {what}; give a sharded checkpoint "
                         "directory written by a sharding strategy (strategy='fsdp')")
    if output.exists() and not args.force:
        raise SystemExit(f"accelkit checkpoint consolidate: {str(output)!r} exists; pass --force to overwrite it")
    if output.is_dir():
        raise SystemExit(f"accelkit checkpoint consolidate: {str(output)!r} is a directory; give a file path")
    dcp_io.consolidate(source, output)
    print(f"wrote {output} ({output.stat().st_size / 2**20:.1f} MiB) from the sharded checkpoint {source}")
    return 0
