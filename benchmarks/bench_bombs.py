"""How long refusing a data bomb takes (issue 36.6: "a clear error for a bomb, in milliseconds").

    python benchmarks/bench_bombs.py [--rounds 7] [--levels 60]

Times, ``--rounds`` times each after one untimed first call (imports, caches), the refusal of:

* ``hparams_file``: the issue's YAML of about 1 KB, nine levels of ten aliases (ten billion values), given to
  ``Module.load_from_checkpoint(plain.ckpt, hparams_file=bomb.yaml)``;
* ``--config``: the same nine levels as a model argument of a configuration, read by
  ``accelkit.cli.CLI(run=False, args=["--config", bomb.yaml])`` (parser built each time, as a command would);
* ``shared lists``: a checkpoint of about 19 KB (a ``Linear(64, 64)``'s weights) whose ``hyper_parameters`` hold one
  list per level, each named twice by the level above (``--levels`` levels: ``2 ** levels`` values), given to
  ``Module.load_from_checkpoint``.

For each it prints the first and the median time in milliseconds and whether the error was the bounded-parsing
error (:class:`accelkit.utilities.bounded.DataBombError`; the CLI turns it into exit status 2 with its message).
As a reference, it also times the CLI reading a configuration of the same model without aliases. Before the bound,
the first case ran for over a minute without an answer and the third exhausted memory.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import accelkit
from accelkit.utilities.bounded import MAX_VALUES, DataBombError

#: the start of the bounded-parsing error's message for too many values (see accelkit.utilities.bounded)
BOUND_WORDS = f"stands for more than {MAX_VALUES:,} values once its aliases"

MODELS = '''
from typing import Any

import torch

import accelkit


class Net(accelkit.Module):
    def __init__(self, extra: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(64, 64)
'''


class Net(accelkit.Module):
    """A module whose hyper-parameters are whatever ``h`` is given (the data under test)."""

    def __init__(self, h: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(64, 64)


def alias_levels(levels: int = 9, width: int = 10) -> list[str]:
    """YAML lines ``a0 .. a<levels>``: each anchor a list of ``width`` aliases of the one before."""
    lines = [f"a0: &a0 [{', '.join(['x'] * width)}]"]
    return lines + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]


def shared_lists(levels: int) -> list:
    """One list per level, each holding the level below twice: ``2 ** levels`` values in ``levels`` lists."""
    shared: list = [1]
    for _ in range(levels):
        shared = [shared, shared]
    return shared


def timed(work: Callable[[], str], rounds: int) -> tuple[float, float, str]:
    """The first call's time, the median of ``rounds`` more (seconds), and what the last call returned."""
    start = time.perf_counter()
    outcome = work()
    first = time.perf_counter() - start
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        outcome = work()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), outcome


def load_refusal(checkpoint: Path, hparams_file: Path | None) -> str:
    """What ``Net.load_from_checkpoint`` raised: ``"DataBombError: ..."``, or ``"loaded"``."""
    try:
        Net.load_from_checkpoint(checkpoint, hparams_file=hparams_file)
    except Exception as error:  # reported, not hidden: the row says which error it was
        return f"{type(error).__name__}: {error}"
    return "loaded"


def cli_outcome(config: Path) -> str:
    """``"exit 2: <stderr>"`` for a refused configuration, ``"parsed"`` for one the CLI read."""
    from accelkit.cli import CLI

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            CLI(run=False, args=["--config", str(config)])
        except SystemExit as stop:
            return f"exit {stop.code}: {err.getvalue().strip()}"
    return "parsed"


def report(label: str, first: float, median: float, outcome: str, bounded: bool) -> bool:
    """Print one row; ``bounded`` says whether the outcome was the bounded-parsing error."""
    verdict = "the bounded-parsing error (DataBombError)" if bounded else f"NOT the bound: {outcome[:300]}"
    print(f"{label:<34} first {first * 1e3:8.1f} ms   median {median * 1e3:8.1f} ms   {verdict}")
    if bounded:
        print(f"    {outcome[outcome.find(': ') + 2:][:150]}...")
    return bounded


def main() -> None:
    """Write the files, time each refusal, print the rows; exit 1 if any case was not refused by the bound."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--levels", type=int, default=60, help="levels of shared lists in the checkpoint")
    args = parser.parse_args()
    logging.getLogger("accelkit").setLevel(logging.WARNING)  # no "Seed set to 0" from each reference parse
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        bomb = folder / "bomb.yaml"
        bomb.write_text("\n".join([*alias_levels(), "h: *a9"]) + "\n")
        models = folder / "bench_bomb_models.py"
        models.write_text(MODELS)
        config = folder / "config_bomb.yaml"
        config.write_text("\n".join(alias_levels()) + f"\nmodel:\n  class_path: {models}:Net\n"
                          "  init_args: {extra: *a9}\n  \ntrainer: {logger: false, enable_checkpointing: false}\n")
        plain_config = folder / "config_plain.yaml"
        plain_config.write_text(f"model:\n  class_path: {models}:Net\n  init_args: {{extra: [1, 2, 3]}}\n"
                                "trainer: {logger: false, enable_checkpointing: false}\n")
        plain = folder / "plain.ckpt"
        torch.save({"state_dict": Net().state_dict(), "hyper_parameters": {"h": 1}}, plain)
        shared = folder / "shared.ckpt"
        torch.save({"state_dict": Net().state_dict(), "hyper_parameters": {"h": shared_lists(args.levels)}}, shared)
        print(f"bomb.yaml {bomb.stat().st_size} bytes (10**10 values); config_bomb.yaml {config.stat().st_size} "
              f"bytes; shared.ckpt {shared.stat().st_size / 1024:.1f} KiB (2**{args.levels} values); "
              f"{args.rounds} rounds; torch {torch.__version__}, python {sys.version.split()[0]}")
        ok = []
        first, median, outcome = timed(lambda: load_refusal(plain, bomb), args.rounds)
        ok.append(report("load_from_checkpoint(hparams_file=)", first, median, outcome,
                         outcome.startswith(f"{DataBombError.__name__}: ") and BOUND_WORDS in outcome))
        first, median, outcome = timed(lambda: cli_outcome(config), args.rounds)
        ok.append(report("CLI --config", first, median, outcome,
                         outcome.startswith("exit 2: ") and f"the configuration {BOUND_WORDS}" in outcome))
        first, median, outcome = timed(lambda: load_refusal(shared, None), args.rounds)
        ok.append(report("load_from_checkpoint(shared lists)", first, median, outcome,
                         outcome.startswith(f"{DataBombError.__name__}: ") and BOUND_WORDS in outcome))
        first, median, outcome = timed(lambda: cli_outcome(plain_config), args.rounds)
        print(f"{'reference: CLI --config, no aliases':<34} first {first * 1e3:8.1f} ms   median "
              f"{median * 1e3:8.1f} ms   {outcome}")
    raise SystemExit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
