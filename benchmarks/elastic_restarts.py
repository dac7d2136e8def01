"""What each failure of an elastic job cost: the steps trained again and the time from the failed attempt's last
batch to the next attempt's first, read from the per-batch records of tests/helpers/elastic_fit.py.

    python -m pytest tests/test_elastic.py -m slow -n 0 --basetemp=/tmp/elastic
    python benchmarks/elastic_restarts.py /tmp/elastic/<test folder>/run/records

One line per attempt after the first: ``attempt N (world W): resumed at step S, L step(s) trained again, restarted
after T s`` (``L``: the failed attempt's steps past the checkpoint it resumed from, the step running when it failed
included: 1 where the survivors wrote the last completed step, DDP's ``survivor.ckpt``; ``T``: from the last batch any
process of the attempt before started to the first batch of this one, which includes torchrun's detection of
the failure, the rendezvous, the processes' start and the checkpoint's loading). Timings are printed, never
asserted; they depend on the machine and its load.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by SIGKILL
                continue
    return rows


def report(rows: list[dict]) -> list[str]:
    rounds = sorted({row["round"] for row in rows})
    lines = []
    for before, after in zip(rounds, rounds[1:], strict=False):
        old = [row for row in rows if row["round"] == before]
        new = [row for row in rows if row["round"] == after]
        start = min(row["step"] for row in new)
        lost = max(row["step"] for row in old) + 1 - start
        gap = min(row["t"] for row in new) - max(row["t"] for row in old)
        lines.append(f"attempt {after} (world {new[0]['world']}): resumed at step {start}, {lost} step(s) trained "
                     f"again, restarted after {gap:.1f} s")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for line in report(read(Path(argv[0]))):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
