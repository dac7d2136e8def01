"""The ``__main__`` of this folder's scenario files (``python xla_scenarios.py NAME OUTDIR``): run one scenario in
this process and write what it returns to ``OUTDIR/result.json`` (``helpers.xla.run_scenario`` reads it back)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path


def run_scenario_main(scenarios: Mapping[str, Callable[[Path], object]]) -> None:
    """Run the scenario named by ``sys.argv[1]`` with the output folder ``sys.argv[2]`` (created if missing), write
    its result as JSON (values JSON lacks written as their ``str``) to ``result.json`` there, and say it is done."""
    name, outdir = sys.argv[1], Path(sys.argv[2])
    outdir.mkdir(parents=True, exist_ok=True)
    data = scenarios[name](outdir)
    (outdir / "result.json").write_text(json.dumps(data, indent=1, default=str))
    print("scenario", name, "done")
