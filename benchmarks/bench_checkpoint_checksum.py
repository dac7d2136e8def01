"""What checking a checkpoint's checksums costs on load (issue 36.3).

    python benchmarks/bench_checkpoint_checksum.py [--megabytes 256] [--rounds 5] [--folder /tmp]

Writes one single-file checkpoint of about ``--megabytes`` MiB (float32 weights and an optimizer state of the same
size, through :func:`accelkit.checkpoint.atomic_save`), then times, ``--rounds`` times each, with the file in the
page cache after a first read (so the numbers are the CPU's, not the disk's):

* ``verify``: :func:`accelkit.checkpoint.files.verify_archive`, the CRC-32 of every record of the archive, what
  :func:`accelkit.checkpoint.load` adds to every load;
* ``torch.load``: ``torch.load(path, weights_only=True)`` alone;
* ``accelkit load``: :func:`accelkit.checkpoint.load`, both together.

It prints the median time of each and the verification's speed in MiB/s (file size over its median time), and
the share verification adds to a load. A cold read from disk costs the disk's time once, for whichever reads
first; the second read comes from the page cache.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from accelkit.checkpoint import atomic_save, load
from accelkit.checkpoint.files import verify_archive


def median_seconds(work: Callable[[], object], rounds: int) -> float:
    """The median wall time of ``rounds`` calls of ``work``."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Write the checkpoint, time the three readers, print the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--folder", default=None, help="where to write the checkpoint (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        path = Path(folder) / "bench.ckpt"
        values = args.megabytes * 2**20 // 8  # float32: half in the weights, half in the optimizer state
        weights = {f"layer{i}.weight": torch.randn(values // 8) for i in range(8)}
        state = {"state": {i: {"exp_avg": torch.randn(values // 8)} for i in range(8)}, "param_groups": []}
        atomic_save({"state_dict": weights, "optimizer_states": [state], "epoch": 0, "global_step": 1}, path)
        size = path.stat().st_size / 2**20
        verify_archive(path)  # into the page cache
        verify = median_seconds(lambda: verify_archive(path), args.rounds)
        plain = median_seconds(lambda: torch.load(path, weights_only=True), args.rounds)
        both = median_seconds(lambda: load(path), args.rounds)
    print(f"checkpoint: {size:.0f} MiB, {args.rounds} rounds, torch {torch.__version__}")
    print(f"verify (CRC-32 of every record): {verify:.3f} s = {size / verify:.0f} MiB/s")
    print(f"torch.load(weights_only=True):   {plain:.3f} s")
    print(f"accelkit load (verify + load):   {both:.3f} s, {100 * (both - plain) / plain:+.0f}% over torch.load")


if __name__ == "__main__":
    main()
