"""accelkit on one GPU versus a hand-written PyTorch loop: steady per-step time, 16-mixed and bf16-mixed.

    python benchmarks/bench_cuda.py [--steps 300] [--warmup 50] [--repeats 3] [--precision 16-mixed bf16-mixed]

Both sides train the same MLP on the same synthetic data (generated here, nothing downloaded) with the same
DataLoader (pinned memory, batches copied with ``non_blocking=True``), optimizer and mixed-precision recipe
(autocast, plus a GradScaler for float16). The steady per-step time is
``(T(warmup + steps) - T(warmup)) / steps``: the difference of two full runs, so start-up, compilation of
kernels and the cost of the first steps cancel. Each measurement is the median of ``--repeats`` runs. The
script prints the ratio accelkit / hand-written per precision; the target is at most 1.02.

Exits with status 2 and a message when no NVIDIA GPU is visible.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit

DTYPES = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


def make_data(n: int, features: int, classes: int) -> TensorDataset:
    """A fixed random classification problem."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=generator)
    y = (x @ torch.randn(features, classes, generator=generator)).argmax(1)
    return TensorDataset(x, y)


def make_net(features: int, hidden: int, classes: int) -> nn.Module:
    """The benchmarked network: a 4-layer MLP."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, classes))


def make_loader(data: TensorDataset, batch_size: int) -> DataLoader:
    """Same loader for both sides, pinned by its maker (accelkit uses a loader as it is given)."""
    return DataLoader(data, batch_size=batch_size, shuffle=True, drop_last=True, pin_memory=True,
                      generator=torch.Generator().manual_seed(0))


class BenchModule(accelkit.Module):
    """The accelkit side: the same network, loss and optimizer as :func:`plain_loop`."""

    def __init__(self, args: argparse.Namespace, data: TensorDataset) -> None:
        super().__init__()
        self.net = make_net(args.features, args.hidden, args.classes)
        self.args, self.data = args, data

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, fused=True)

    def train_dataloader(self):
        return make_loader(self.data, self.args.batch_size)


def _infinite(loader: DataLoader):
    while True:
        yield from loader


def plain_loop(args: argparse.Namespace, data: TensorDataset, precision: str, steps: int) -> float:
    """Hand-written loop; returns wall seconds for ``steps`` optimizer steps including set-up."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    device = torch.device("cuda", 0)
    net = make_net(args.features, args.hidden, args.classes).to(device)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, fused=True)
    dtype = DTYPES[precision]
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    batches = _infinite(make_loader(data, args.batch_size))
    net.train()
    for _ in range(steps):
        x, y = next(batches)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(net(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def accelkit_run(args: argparse.Namespace, data: TensorDataset, precision: str, steps: int) -> float:
    """The same work through ``accelkit.Trainer``; returns wall seconds including set-up."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    trainer = accelkit.Trainer(accelerator="cuda", devices=1, precision=precision, max_steps=steps,
                               logger=False, enable_progress_bar=False, enable_checkpointing=False,
                               limit_val_batches=0)
    trainer.fit(BenchModule(args, data))
    torch.cuda.synchronize()
    return time.perf_counter() - start


def per_step(run, args: argparse.Namespace, data: TensorDataset, precision: str) -> float:
    """Median over repeats of (T(warmup + steps) - T(warmup)) / steps, in seconds."""
    samples = []
    for _ in range(args.repeats):
        short = run(args, data, precision, args.warmup)
        long = run(args, data, precision, args.warmup + args.steps)
        samples.append((long - short) / args.steps)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one line per precision; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--features", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--samples", type=int, default=65536)
    parser.add_argument("--precision", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench_cuda: no NVIDIA GPU is visible (torch.cuda.is_available() is False); this benchmark compares "
              "accelkit with a plain PyTorch loop on a GPU and has nothing to measure here.", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    print(f"device: {name}; torch {torch.__version__}; accelkit {accelkit.__version__}; MLP {args.features}-"
          f"{args.hidden}x3-{args.classes}, batch {args.batch_size}, {args.steps} steps after {args.warmup}, "
          f"median of {args.repeats}")
    data = make_data(args.samples, args.features, args.classes)
    worst = 0.0
    for precision in args.precision:
        if DTYPES[precision] == torch.bfloat16 and torch.cuda.get_device_capability(0) < (8, 0):
            print(f"{precision:>10}: skipped, {name} has no native bfloat16")
            continue
        plain = per_step(plain_loop, args, data, precision)
        ours = per_step(accelkit_run, args, data, precision)
        ratio = ours / plain
        worst = max(worst, ratio)
        print(f"{precision:>10}: plain {plain * 1e3:.3f} ms/step, accelkit {ours * 1e3:.3f} ms/step, "
              f"ratio {ratio:.3f} ({'within' if ratio <= 1.02 else 'ABOVE'} the 1.02 target)")
    return 0 if worst <= 1.02 else 1


if __name__ == "__main__":
    sys.exit(main())
