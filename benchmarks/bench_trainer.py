"""Steady-state cost of one training step: accelkit's Trainer against a hand-written PyTorch loop.

Both sides train the same Module class (an MLP) on the same in-memory data with the same DataLoader and Adam,
in one process on the CPU; the loop calls ``model(x)`` and the loss itself. The Trainer runs with the progress bar, logger, checkpointing and validation off (they are per-epoch or
optional costs; the hand-written loop has none of them). It is measured twice: with the module calling
``self.log("train_loss", loss)`` every step, as real modules do, and without. Each measurement skips a warm-up
epoch and keeps the fastest of the following epochs (on a shared machine interference only ever adds time);
the sides alternate round by round so machine load hits both alike. The ratio printed is the median over
rounds of (Trainer time per step) / (loop time per step); the target is <= 1.05.

    .venv/bin/python benchmarks/bench_trainer.py [--rounds 7] [--epochs 3] [--width 256]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def make_data(n: int = 2048, seed: int = 0) -> TensorDataset:
    """Synthetic 64-feature, 10-class data (the digits example's shapes, larger)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 64, generator=generator)
    y = torch.randint(0, 10, (n,), generator=generator)
    return TensorDataset(x, y)


def make_net(width: int) -> nn.Module:
    """The MLP both sides train."""
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


class BenchModule(accelkit.Module):
    """The MLP as an accelkit Module; logs its loss every step like a real module."""

    def __init__(self, width: int, log: bool = True) -> None:
        super().__init__()
        self.net = make_net(width)
        self.do_log = log

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        if self.do_log:
            self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class EpochTimer(accelkit.Callback):
    """Wall time of every training epoch."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.times.append(time.perf_counter() - self._start)


def trainer_step_time(loader: DataLoader, width: int, epochs: int, log: bool) -> float:
    """Seconds per step of the Trainer: its fastest epoch after the first (interference only adds time)."""
    timer = EpochTimer()
    trainer = accelkit.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=False,
                               enable_progress_bar=False, enable_checkpointing=False, callbacks=[timer])
    torch.manual_seed(0)
    trainer.fit(BenchModule(width, log), train_dataloaders=loader)
    return min(timer.times[1:]) / len(loader)


def loop_step_time(loader: DataLoader, width: int, epochs: int) -> float:
    """Seconds per step of the plain loop: its fastest epoch after the first."""
    torch.manual_seed(0)
    net = BenchModule(width, log=False)  # the same module class, called as a plain nn.Module
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.train()
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        for x, y in loader:
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return min(times[1:]) / len(loader)


def main() -> None:
    """Alternate the sides for ``--rounds`` rounds and print the per-step times and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=5, help="epochs per measurement (the first is warm-up)")
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave the default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # plugin-discovery warnings of unrelated, uninstalled plugins
    loader = DataLoader(make_data(), batch_size=args.batch_size, shuffle=True)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; MLP width {args.width}, "
          f"batch {args.batch_size}, {len(loader)} steps/epoch, best of {args.epochs - 1} epochs x {args.rounds} rounds")
    loop, logged, bare = [], [], []
    for _ in range(args.rounds):
        loop.append(loop_step_time(loader, args.width, args.epochs))
        logged.append(trainer_step_time(loader, args.width, args.epochs, log=True))
        bare.append(trainer_step_time(loader, args.width, args.epochs, log=False))
    ratios_logged = [t / l for t, l in zip(logged, loop)]
    ratios_bare = [t / l for t, l in zip(bare, loop)]
    ms = lambda v: f"{1e3 * statistics.median(v):.3f} ms"  # noqa: E731
    print(f"hand-written loop        : {ms(loop)} per step (median)")
    print(f"Trainer, self.log/step   : {ms(logged)} per step (median)")
    print(f"Trainer, no self.log     : {ms(bare)} per step (median)")
    print(f"ratio Trainer(self.log)/loop: {statistics.median(ratios_logged):.3f} "
          f"(per round: {', '.join(f'{r:.3f}' for r in ratios_logged)})")
    print(f"ratio Trainer(no log)/loop  : {statistics.median(ratios_bare):.3f} "
          f"(per round: {', '.join(f'{r:.3f}' for r in ratios_bare)})")
    print("target: <= 1.05")


if __name__ == "__main__":
    main()
