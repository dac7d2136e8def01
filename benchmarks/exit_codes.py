"""Do complete runs exit 0? Runs N complete training scripts, each in a fresh interpreter, and counts the ones
that did not end cleanly.

    python benchmarks/exit_codes.py --kind xla --runs 20
    python benchmarks/exit_codes.py --kind xla_spawn --runs 20
    python benchmarks/exit_codes.py --kind ddp_spawn --runs 20

One run is what a user's script does: ``fit`` (with the sanity check and a validation pass per epoch), then
``validate``, ``test`` and ``predict``, printing each result, with the default progress bar, logger and
checkpoints. Its loaders hold more batches than torch_xla's device loader reads ahead, every loop stops early
(the sanity check's 2 batches, ``limit_*_batches``) and the script ends right after the last one: the moment at
which a background thread still copying batches (a device loader's, a logger's, a watchdog's) meets the
interpreter's shutdown, which ends the process with ``terminate called without an active exception``
(SIGABRT, exit 134) although every result was printed.

Kinds: ``xla`` is ``accelerator="tpu", devices=1`` (strategy ``xla_single``) and ``xla_spawn`` the same through
``torch_xla.launch`` (one replica), both on ``PJRT_DEVICE=CPU``; ``ddp_spawn`` is ``accelerator="cpu",
strategy="ddp_spawn", devices=2``. A run counts as failed when its exit status is not 0, or when its output
reports an abort that the launcher swallowed (a spawned worker's ``terminate called ...``). The summary line is
``<kind>: <failed> of <runs> runs failed``; the exit status is 1 when any run failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import accelkit  # imports no torch_xla: the XLA kinds import it in the run itself

#: output that means a process aborted, even where the launcher's exit status hides it
ABORT_MARKERS = ("terminate called", "Fatal Python error", "core dumped")

KINDS = {
    "xla": {"accelerator": "tpu", "devices": 1},
    "xla_spawn": {"accelerator": "tpu", "devices": 1, "strategy": "xla_spawn"},
    "ddp_spawn": {"accelerator": "cpu", "devices": 2, "strategy": "ddp_spawn"},
}


def child_env(kind: str) -> dict[str, str]:
    """The environment of one run: XLA on the host CPU for the XLA kinds, nothing left over from a launcher."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELKIT_", "PJRT_", "XRT_", "TPU_", "CPU_NUM_DEVICES"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    if kind.startswith("xla"):
        env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    env["PYTHONUNBUFFERED"] = "1"
    return env


# ----------------------------------------------------------------------------------------------- one run
WIDTH, ROWS, BATCH = 50_000, 2_000, 32  # 63 batches of 6.4 MB: more than the device loader reads ahead


class Rows(Dataset):
    """``ROWS`` samples of ``WIDTH`` features (256 distinct ones, repeated: 51 MB however long) and a target."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(256, WIDTH, generator=generator)
        self.y = self.x[:, :8].sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return ROWS

    def __getitem__(self, index: int):
        return self.x[index % 256], self.y[index % 256]


class Wide(accelkit.Module):
    """A linear model on the first 8 of ``WIDTH`` columns: little compute, much data to copy to the device."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(8, 1)

    def forward(self, x):
        return self.layer(x[:, :8])

    def _loss(self, batch):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch, batch_idx):
        self.log("test_loss", self._loss(batch))

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def complete_run(kind: str, root: str) -> None:
    """The user's script: fit, validate, test, predict, each result printed."""
    data = Rows()

    def loader() -> DataLoader:
        return DataLoader(data, batch_size=BATCH)

    trainer = accelkit.Trainer(max_epochs=2, limit_train_batches=6, limit_val_batches=3, limit_test_batches=3,
                               limit_predict_batches=2, default_root_dir=root, **KINDS[kind])
    model = Wide()
    trainer.fit(model, loader(), loader())
    print("validate:", trainer.validate(model, loader()), flush=True)
    print("test:", trainer.test(model, loader()), flush=True)
    print("predict:", [float(p) for p in trainer.predict(model, loader())], flush=True)


# ----------------------------------------------------------------------------------------------- the count
def run_once(kind: str, timeout: float) -> tuple[int, float, str]:
    """One complete run in a fresh interpreter: ``(exit status, seconds, why it failed or "")``."""
    with tempfile.TemporaryDirectory(prefix="accelkit-exit-") as root:
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", kind, root], cwd=root,
                                  env=child_env(kind), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return -1, time.perf_counter() - start, f"still running after {timeout:.0f} s"
        seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    aborts = [line.strip() for line in output.splitlines() if any(m in line for m in ABORT_MARKERS)]
    if proc.returncode != 0:
        last = aborts[0] if aborts else (output.strip().splitlines() or ["(no output)"])[-1]
        return proc.returncode, seconds, last
    if "predict:" not in proc.stdout:
        return proc.returncode, seconds, "exited 0 without printing the predict results"
    if aborts:
        return proc.returncode, seconds, f"exited 0, but a process aborted: {aborts[0]}"
    return 0, seconds, ""


def count(kind: str, runs: int, timeout: float) -> int:
    """Run ``runs`` complete runs of ``kind``, print one line each and a summary; return how many failed."""
    failed = 0
    for index in range(1, runs + 1):
        status, seconds, why = run_once(kind, timeout)
        failed += bool(why)
        print(f"{kind} run {index}/{runs}: exit {status} in {seconds:.1f} s" + (f"  FAILED: {why}" if why else ""),
              flush=True)
    print(f"{kind}: {failed} of {runs} runs failed", flush=True)
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=sorted(KINDS), default="xla")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    parser.add_argument("--one", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)  # a single run
    args = parser.parse_args(argv)
    if args.one:
        complete_run(args.one[0], args.one[1])
        return 0
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give at least 1")
    return 1 if count(args.kind, args.runs, args.timeout) else 0


if __name__ == "__main__":
    sys.exit(main())
