"""accelkit's ``xla_spmd`` versus a hand-written torch_xla SPMD loop: steady per-step time, compilations after warm-up.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=4 python benchmarks/bench_xla_spmd.py [--rounds 8] [--steps 30] [--warmup 5]

Both sides run in this one process over every XLA device (4 by default on the host CPU), in SPMD mode, and train
the same MLP (same seed, same data, SGD, mean squared error to 2-d targets). The hand-written side is what
torch_xla's SPMD guide shows: ``use_spmd()``, a one-axis ``Mesh`` named ``("data",)``, ``MpDeviceLoader`` with
``input_sharding=ShardingSpec(mesh, ("data", None))``, then per step ``zero_grad()``, forward,
``loss.backward()``, ``optimizer.step()`` and ``torch_xla.sync()``. The accelkit side is
``Trainer(accelerator="tpu", strategy="xla_spmd", devices="auto").fit(...)``; its loop clears the gradients in
the same place (Lightning's order: in the closure, before ``backward``), so both sides compile the same graph.

A third side, ``hand-free``, clears the gradients after the optimizer step, before the cut: the gradients are
then dead at the cut and XLA need not write them out, a smaller graph. It is reported for reference only (a
different program, not framework overhead).

Each round runs the two sides back to back, alternating which goes first (ABBA...), so slow drift of the machine
affects both alike; round 0 compiles every graph and is discarded. Within a run the first ``--warmup`` steps are
excluded; the clock starts and stops after ``xm.wait_device_ops()`` so queued device work is counted. Reported:
the median over rounds of each side's steady per-step time, the median of the per-round ratios accelkit/hand
(target <= 1.05), and the compilations (``CompileTime`` samples) during the steady steps (target 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("PJRT_DEVICE", "CPU")
os.environ.setdefault("CPU_NUM_DEVICES", "4")

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit


def make_data(steps: int, batch: int, width: int) -> TensorDataset:
    """``steps`` batches of random inputs with random 16-wide targets (fixed seed)."""
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.randn(steps * batch, width, generator=g), torch.randn(steps * batch, 16, generator=g))


def make_net(width: int) -> torch.nn.Sequential:
    """The benchmarked MLP (same weights on every call)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                               torch.nn.ReLU(), torch.nn.Linear(width, 16))


class BenchModule(accelkit.Module):
    """The MLP as an accelkit Module; nothing logged (the hand loop logs nothing)."""

    def __init__(self, width: int, data: TensorDataset, batch: int) -> None:
        super().__init__()
        self.net = make_net(width)
        self.data = data
        self.batch = batch

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

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
    trainer = accelkit.Trainer(accelerator="tpu", strategy="xla_spmd", devices="auto", max_steps=args.steps,
                               max_epochs=1, enable_progress_bar=False, enable_checkpointing=False, logger=False,
                               enable_model_summary=False, callbacks=[clock])
    trainer.fit(BenchModule(args.width, data, args.batch))
    assert trainer.global_step == args.steps, trainer.global_step
    return (clock.stop - clock.start) / clock.steps_timed, clock.compiles_stop - clock.compiles_start


def run_hand(data: TensorDataset, args: argparse.Namespace, free_before_cut: bool = False) -> tuple[float, int]:
    """The same training written directly against torch_xla's SPMD API; same return value as :func:`run_accelkit`.

    :param free_before_cut: clear the gradients after the optimizer step instead of before the forward pass
        (the ``hand-free`` reference: a different, smaller graph)."""
    import numpy as np
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.parallel_loader as pl
    import torch_xla.distributed.spmd as xs
    import torch_xla.runtime as xr

    xr.use_spmd()
    count = xr.global_runtime_device_count()
    mesh = xs.Mesh(np.arange(count), (count,), ("data",))
    device = torch_xla.device()
    net = make_net(args.width).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = pl.MpDeviceLoader(DataLoader(data, batch_size=args.batch, shuffle=False, drop_last=True), device,
                               input_sharding=xs.ShardingSpec(mesh, ("data", None)))
    net.train()
    start = 0.0
    compiles_start = 0
    for step, (x, y) in enumerate(loader, 1):
        if not free_before_cut:
            optimizer.zero_grad()
        loss = F.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        if free_before_cut:
            optimizer.zero_grad()
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
    parser.add_argument("--batch", type=int, default=128, help="global batch size, split over the devices (128)")
    args = parser.parse_args(argv)
    if not 1 <= args.warmup < args.steps:
        parser.error(f"--warmup={args.warmup} must be >= 1 and below --steps={args.steps}")
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds} must be >= 1")

    import torch_xla.runtime as xr

    xr.use_spmd()  # before anything uses a device, for both sides
    data = make_data(args.steps, args.batch, args.width)
    sides = ("hand", "accelkit", "hand-free")
    runners = {"hand": run_hand, "accelkit": run_accelkit,
               "hand-free": lambda d, a: run_hand(d, a, free_before_cut=True)}
    times: dict[str, list[float]] = {side: [] for side in sides}
    compiles: dict[str, list[int]] = {side: [] for side in sides}
    ratios = []
    for side in sides:  # round 0 (discarded): compiles every graph, fills caches
        runners[side](data, args)
    for round_index in range(args.rounds):
        # hand and accelkit run next to each other in alternating order (ABBA...); the reference runs last
        order = ("hand", "accelkit", "hand-free") if round_index % 2 == 0 else ("accelkit", "hand", "hand-free")
        this_round = {}
        for side in order:
            per_step, compiled = runners[side](data, args)
            times[side].append(per_step)
            compiles[side].append(compiled)
            this_round[side] = per_step
        ratios.append(this_round["accelkit"] / this_round["hand"])
        print(f"round {round_index + 1} ({' then '.join(order)}): "
              + "   ".join(f"{side} {this_round[side] * 1e3:8.3f} ms/step" for side in sides)
              + f"   ratio accelkit/hand {ratios[-1]:.3f}", flush=True)

    print(f"\ndevice: {xr.device_type()} (PJRT, SPMD over {xr.global_runtime_device_count()} devices), torch "
          f"{torch.__version__}; MLP width {args.width}, global batch {args.batch}, {args.steps} steps per run, "
          f"first {args.warmup} excluded, {args.rounds} rounds")
    for side in sides:
        print(f"{side:>10}: median {statistics.median(times[side]) * 1e3:8.3f} ms/step "
              f"(min {min(times[side]) * 1e3:.3f}, max {max(times[side]) * 1e3:.3f}); compilations after warm-up "
              f"per run: {compiles[side]}")
    print(f"ratio accelkit/hand (median of per-round ratios): {statistics.median(ratios):.3f}  (target <= 1.05)")
    print(f"compilations after warm-up: hand {sum(compiles['hand'])}, accelkit {sum(compiles['accelkit'])} "
          "(target 0)")
    print(f"for reference, hand-free (gradients cleared before the cut, a smaller graph) / accelkit: "
          f"{statistics.median(times['hand-free']) / statistics.median(times['accelkit']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
