"""accelkit on XLA versus a hand-written torch_xla loop: steady per-step time and compilations after warm-up.

    PJRT_DEVICE=CPU python benchmarks/bench_xla.py [--rounds 8] [--steps 30] [--warmup 5] [--width 512]

Both sides train the same MLP (same seed, same data, SGD) on one XLA core. The hand-written side is what the
torch_xla guides show: ``MpDeviceLoader``, ``loss.backward()``, ``xm.optimizer_step`` and ``torch_xla.sync()``
per step. The accelkit side is ``Trainer(accelerator="xla", devices=1).fit(...)`` (strategy ``xla_single``).

A third side, ``hand-guide``, is the hand loop with ``zero_grad()`` first in the step, as the guides write it;
it builds a different graph (the gradients are still alive at the cut), so it is reported for reference only.

Each round runs the sides back to back, alternating which goes first, so slow drift of the machine affects
both alike. Within a run the first ``--warmup`` steps are excluded; the clock starts and stops after
``xm.wait_device_ops()`` so queued device work is counted. Reported per side: the median over rounds of the
steady per-step time, the median of the per-round ratio accelkit/hand (target <= 1.05), and the
compilations (``CompileTime`` samples) during the steady steps (target 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")

import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import accelkit  # noqa: E402


def make_data(steps: int, batch: int, width: int) -> TensorDataset:
    """``steps`` batches of random inputs with 10-class labels (fixed seed)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(steps * batch, width, generator=g)
    y = torch.randint(0, 10, (steps * batch,), generator=g)
    return TensorDataset(x, y)


def make_net(width: int) -> torch.nn.Sequential:
    """The benchmarked MLP (same weights on every call)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 10))


class BenchModule(accelkit.Module):
    """The MLP as an accelkit Module: cross-entropy loss, SGD; nothing logged (the hand loop logs nothing)."""

    def __init__(self, width: int, data: TensorDataset, batch: int) -> None:
        super().__init__()
        self.net = make_net(width)
        self.data = data
        self.batch = batch

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(self.data, batch_size=self.batch, shuffle=False, drop_last=True)


def compile_count() -> int:
    """Total ``CompileTime`` samples so far in this process."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


class SteadyClock(accelkit.Callback):
    """Starts the clock after ``warmup`` optimizer steps and stops it when training ends."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.start = self.stop = 0.0
        self.compiles_start = self.compiles_stop = 0
        self.steps_timed = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        import torch_xla.core.xla_model as xm

        if trainer.global_step == self.warmup:
            xm.wait_device_ops()
            self.start = time.perf_counter()
            self.compiles_start = compile_count()

    def on_train_end(self, trainer, module):
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()
        self.stop = time.perf_counter()
        self.compiles_stop = compile_count()
        self.steps_timed = trainer.global_step - self.warmup


def run_accelkit(data: TensorDataset, args: argparse.Namespace) -> tuple[float, int]:
    """One accelkit fit; returns (steady seconds per step, compilations during the steady steps)."""
    clock = SteadyClock(args.warmup)
    trainer = accelkit.Trainer(accelerator="xla", devices=1, max_steps=args.steps, max_epochs=1,
                               enable_progress_bar=False, enable_checkpointing=False, logger=False,
                               callbacks=[clock])
    trainer.fit(BenchModule(args.width, data, args.batch))
    assert trainer.global_step == args.steps, trainer.global_step
    return (clock.stop - clock.start) / clock.steps_timed, clock.compiles_stop - clock.compiles_start


def run_hand(data: TensorDataset, args: argparse.Namespace, zero_grad_first: bool = False) -> tuple[float, int]:
    """The same training written directly against torch_xla; same return value as :func:`run_accelkit`.

    :param zero_grad_first: clear gradients at the start of each step, as the torch_xla guides write it. The
        gradients are then still alive when the graph is cut, so XLA must write them out: a different (larger)
        graph. By default they are cleared after the optimizer step, before the cut, as accelkit does, so both
        sides run the same graph and the ratio measures the framework's own overhead.
    """
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl

    device = torch_xla.device()
    net = make_net(args.width).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = pl.MpDeviceLoader(DataLoader(data, batch_size=args.batch, shuffle=False, drop_last=True), device)
    net.train()
    start = 0.0
    compiles_start = 0
    for step, (x, y) in enumerate(loader, 1):
        if zero_grad_first:
            optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        xm.optimizer_step(optimizer)
        if not zero_grad_first:
            optimizer.zero_grad(set_to_none=True)
        torch_xla.sync()
        if step == args.warmup:
            xm.wait_device_ops()
            start = time.perf_counter()
            compiles_start = compile_count()
        if step == args.steps:
            break
    xm.wait_device_ops()
    return (time.perf_counter() - start) / (args.steps - args.warmup), compile_count() - compiles_start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (default 8)")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per run (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="steps excluded from timing (default 5)")
    parser.add_argument("--width", type=int, default=512, help="MLP width (default 512)")
    parser.add_argument("--batch", type=int, default=128, help="batch size (default 128)")
    args = parser.parse_args(argv)
    if not 1 <= args.warmup < args.steps:
        parser.error(f"--warmup={args.warmup} must be >= 1 and below --steps={args.steps}")
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds} must be >= 1")

    data = make_data(args.steps, args.batch, args.width)
    sides = ("hand", "accelkit", "hand-guide")
    times: dict[str, list[float]] = {side: [] for side in sides}
    compiles: dict[str, list[int]] = {side: [] for side in sides}
    ratios = []
    runners = {"accelkit": run_accelkit, "hand": run_hand,
               "hand-guide": lambda d, a: run_hand(d, a, zero_grad_first=True)}
    for side in sides:  # round 0 (discarded): compiles every graph, fills caches
        runners[side](data, args)
    for round_index in range(args.rounds):
        # hand and accelkit always run next to each other, in alternating order (ABBA...); the reference
        # side runs last, so it never sits between the two compared ones
        order = ("hand", "accelkit", "hand-guide") if round_index % 2 == 0 else ("accelkit", "hand", "hand-guide")
        this_round = {}
        for side in order:
            per_step, compiled = runners[side](data, args)
            times[side].append(per_step)
            compiles[side].append(compiled)
            this_round[side] = per_step
        ratios.append(this_round["accelkit"] / this_round["hand"])
        print(f"round {round_index + 1}: "
              + "   ".join(f"{side} {this_round[side] * 1e3:8.3f} ms/step" for side in sides)
              + f"   ratio accelkit/hand {ratios[-1]:.3f}", flush=True)

    import torch_xla.runtime as xr

    print(f"\ndevice: {xr.device_type()} (PJRT), torch {torch.__version__}; MLP width {args.width}, batch "
          f"{args.batch}, {args.steps} steps per run, first {args.warmup} excluded, {args.rounds} rounds")
    for side in sides:
        print(f"{side:>10}: median {statistics.median(times[side]) * 1e3:8.3f} ms/step "
              f"(min {min(times[side]) * 1e3:.3f}, max {max(times[side]) * 1e3:.3f}); compilations after warm-up "
              f"per run: {compiles[side]}")
    ratio = statistics.median(ratios)
    print(f"ratio accelkit/hand (median of per-round ratios): {ratio:.3f}  (target <= 1.05)")
    print(f"compilations after warm-up: hand {sum(compiles['hand'])}, accelkit {sum(compiles['accelkit'])} "
          "(target 0)")
    print(f"for reference, hand-guide (zero_grad at the start of the step, a different graph) / accelkit: "
          f"{statistics.median(times['hand-guide']) / statistics.median(times['accelkit']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
