"""Command line and record keeping shared by the conformance scripts.

This file is the scripts' test scaffolding, not part of what a Lightning user writes: it parses
``--accelerator/--devices/--strategy/--root``, and lets code running inside a worker process (a spawned DDP
rank, an XLA replica) leave JSON records that the launching process reads back to assert on.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def parse_args(description: str) -> argparse.Namespace:
    """The options every conformance script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--accelerator", default="cpu")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--root", default=None, help="output folder (default: a new temporary folder)")
    args = parser.parse_args()
    args.root = str(Path(args.root or tempfile.mkdtemp(prefix="accelkit-conformance-")).resolve())
    return args


def trainer_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The Trainer arguments taken from the command line."""
    return {"accelerator": args.accelerator, "devices": args.devices, "strategy": args.strategy,
            "default_root_dir": args.root}


def _folder(root: str | os.PathLike) -> Path:
    folder = Path(root) / "records"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def write(root: str | os.PathLike, tag: str, rank: int, data: Any) -> None:
    """Store ``data`` (JSON) as the record ``tag`` of process ``rank``, replacing an earlier one."""
    path = _folder(root) / f"{tag}.rank{int(rank)}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def append(root: str | os.PathLike, tag: str, rank: int, item: Any) -> None:
    """Add ``item`` (JSON) to the list record ``tag`` of process ``rank``."""
    with open(_folder(root) / f"{tag}.rank{int(rank)}.jsonl", "a") as handle:
        handle.write(json.dumps(item) + "\n")


def read(root: str | os.PathLike, tag: str) -> dict[int, Any]:
    """Every process's record ``tag``: ``{rank: data}`` (list records as lists)."""
    found: dict[int, Any] = {}
    for path in _folder(root).glob(f"{tag}.rank*.json*"):
        rank = int(path.name[len(tag) + 5:].split(".")[0])
        if path.suffix == ".jsonl":
            found[rank] = [json.loads(line) for line in path.read_text().splitlines() if line]
        else:
            found[rank] = json.loads(path.read_text())
    return dict(sorted(found.items()))


def expect(condition: bool, message: str) -> None:
    """``assert`` that survives ``python -O``."""
    if not condition:
        raise AssertionError(message)


def _plain(value: Any) -> Any:
    """A tensor or NumPy number as JSON has it: a number, or a list of them."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"report() takes numbers, strings, tensors and lists or dicts of them, not {type(value).__name__}")


def report(**numbers: Any) -> None:
    """Print what the script measured as one JSON line (``CONFORMANCE NUMBERS {...}``), floats in full precision:
    ``tests/test_conformance.py`` compares the line of a script's accelkit run with its Lightning run's."""
    print(f"CONFORMANCE NUMBERS {json.dumps(numbers, default=_plain, sort_keys=True)}", flush=True)


def ok(name: str) -> None:
    """The line the test runner looks for."""
    print(f"CONFORMANCE OK {name}", flush=True)
