"""How long a run takes to end after SIGTERM during its first compilation (issue 36.8: "within the pre-emption grace").

    python benchmarks/sigterm_compile.py [--runs 3] [--delay 2] [--grace SECONDS] [--reference]

Each run starts a fresh interpreter that fits a small MLP with ``compile_step=True`` on the CPU, one process (the
in-place launcher), with an empty inductor cache of its own (a cold compilation, as a pre-empted job's first start
has). When the first batch begins (the step is being compiled), plus ``--delay`` seconds, the script sends SIGTERM
to that process, as a scheduler's pre-emption notice would, and waits for it to end. It prints, per run: the time
from the signal to the end of the process, the exit status, how the run stopped (at the grace without saving, or
after a step with ``interrupted.ckpt`` saved) and the error's last line; then the median and the largest time.

The grace is :data:`accelkit.strategies.launchers.interrupt.STOP_GRACE_S` (20 s, docs/topology.rst "Which grace")
unless ``--grace`` sets ``InPlaceLauncher.grace_s``; a scheduler's SIGKILL follows its SIGTERM after 30 s by default.
``--reference`` first times one run without a signal from the first batch to the first step (the compilation's
length here), to show whether the signal fell inside it.
"""

from __future__ import annotations

import argparse
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from accelkit.strategies.launchers.interrupt import STOP_GRACE_S

# the run: prints "batch N" before each batch and "step N" after it; GRACE_S sets the in-place launcher's grace
PROGRAM = """
import os, sys
import torch
import accelkit
from torch.utils.data import DataLoader, TensorDataset

class Report(accelkit.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        print(f"batch {batch_idx}", flush=True)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        print(f"step {trainer.global_step}", flush=True)

class MLP(accelkit.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(*[layer for _ in range(6) for layer in (torch.nn.Linear(64, 64),
                                                                             torch.nn.GELU(), torch.nn.LayerNorm(64))])

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(256, 64), torch.randn(256, 64)), batch_size=16)

if "GRACE_S" in os.environ:
    from accelkit.strategies.launchers.in_place import InPlaceLauncher
    InPlaceLauncher.grace_s = float(os.environ["GRACE_S"])
torch.manual_seed(0)
trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=1000, logger=False, enable_progress_bar=False,
                           enable_model_summary=False, default_root_dir=sys.argv[1], callbacks=[Report()],
                           compile_step=True)
trainer.fit(MLP())
"""


class Lines:
    """The run's output lines as they come, each with the time it was read: a thread per stream."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.queue: queue.Queue[tuple[float, str, str]] = queue.Queue()
        self.seen: list[tuple[float, str, str]] = []
        self.threads = [threading.Thread(target=self._read, args=(stream, name), daemon=True)
                        for stream, name in ((process.stdout, "out"), (process.stderr, "err"))]
        for thread in self.threads:
            thread.start()

    def _read(self, stream: Any, name: str) -> None:
        for line in stream:
            self.queue.put((time.monotonic(), name, line.rstrip("\n")))

    def wait_for(self, prefix: str, timeout: float) -> bool:
        """Read until a stdout line starting with ``prefix``; ``False`` if the run ended or timed out first."""
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                item = self.queue.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if self.process.poll() is not None and not any(t.is_alive() for t in self.threads):
                    return False
                continue
            self.seen.append(item)
            if item[1] == "out" and item[2].startswith(prefix):
                return True
        return False

    def rest(self) -> list[tuple[float, str, str]]:
        """Every line, once both streams have closed (the process and whatever it started that holds them)."""
        for thread in self.threads:
            thread.join()
        while not self.queue.empty():
            self.seen.append(self.queue.get())
        return self.seen


def start(folder: Path, grace: float | None) -> tuple[subprocess.Popen, Lines]:
    """A fresh interpreter running :data:`PROGRAM` with its own empty inductor cache under ``folder``."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(folder / "inductor"), TMPDIR=str(folder / "tmp"),
               PYTHONUNBUFFERED="1")
    (folder / "tmp").mkdir()
    if grace is not None:
        env["GRACE_S"] = str(grace)
    process = subprocess.Popen([sys.executable, "-c", PROGRAM, str(folder / "run")], cwd=folder, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return process, Lines(process)


def reference(grace: float | None, timeout: float) -> None:
    """Time one run without a signal from its first batch to its first step (the first compilation)."""
    with tempfile.TemporaryDirectory() as name:
        process, lines = start(Path(name), grace)
        try:
            if not lines.wait_for("batch 0", timeout):
                print(f"reference: no first batch within {timeout:.0f} s")
                return
            began = time.monotonic()
            reached = lines.wait_for("step 1", timeout)
            took = time.monotonic() - began
            print(f"reference (no signal): first batch to first step {took:.1f} s" if reached else
                  f"reference: no first step within {timeout:.0f} s")
        finally:
            process.kill()
            process.wait()
            lines.rest()


def one_run(number: int, delay: float, grace: float | None, timeout: float) -> float | None:
    """One run stopped by SIGTERM during its first compilation; prints its row, returns seconds to its end."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        process, lines = start(folder, grace)
        if not lines.wait_for("batch 0", timeout):
            process.kill()
            process.wait()
            print(f"run {number}: no first batch within {timeout:.0f} s: "
                  f"{[line for _, kind, line in lines.rest() if kind == 'err'][-20:]}")
            return None
        time.sleep(delay)
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            lines.rest()
            print(f"run {number}: still running {timeout:.0f} s after SIGTERM (killed)")
            return None
        ended = time.monotonic() - signalled
        seen = lines.rest()
        closed = max([ended, *(t - signalled for t, _, _ in seen)])
        saved = (folder / "run" / "checkpoints" / "interrupted.ckpt").exists()
        err = [(t, line) for t, kind, line in seen if kind == "err"]
        said = [t - signalled for t, line in err if line.startswith("accelkit.errors.TrainingInterrupted: ")]
        if any("it was compiling the step with torch.compile" in line for _, line in err):
            how = "stopped at the grace, during the compilation, nothing saved"
        elif saved:
            how = "stopped after a step (the compilation ended within the grace), interrupted.ckpt saved"
        else:
            how = "ended otherwise"
        steps = sum(kind == "out" and line.startswith("step ") for _, kind, line in seen)
        last = err[-1][1] if err else "(no error output)"
        print(f"run {number}: the process ended {ended:5.1f} s after SIGTERM (sent {delay:.1f} s into the first "
              f"batch; the error's last line printed at {said[-1] if said else float('nan'):.1f} s, the output "
              f"closed at {closed:.1f} s), exit status {process.returncode}, {steps} steps trained; {how}\n"
              f"    last line: {last[:200]}")
        return ended


def main() -> None:
    """Run the reference if asked, then ``--runs`` interrupted runs; print each and the median and largest."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds after the first batch begins to signal")
    parser.add_argument("--grace", type=float, default=None, help="InPlaceLauncher.grace_s (default: the library's)")
    parser.add_argument("--reference", action="store_true", help="first time an uninterrupted first compilation")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each stage of a run")
    args = parser.parse_args()
    grace = STOP_GRACE_S if args.grace is None else args.grace
    print(f"grace {grace:.0f} s ({'--grace' if args.grace is not None else 'STOP_GRACE_S'}); a scheduler's SIGKILL "
          f"comes 30 s after its SIGTERM by default; python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    if args.reference:
        reference(args.grace, args.timeout)
    times = [t for n in range(1, args.runs + 1) if (t := one_run(n, args.delay, args.grace, args.timeout)) is not None]
    if times:
        print(f"signal to end: median {statistics.median(times):.1f} s, largest {max(times):.1f} s over "
              f"{len(times)} runs (grace {grace:.0f} s)")
    raise SystemExit(0 if len(times) == args.runs else 1)


if __name__ == "__main__":
    main()
