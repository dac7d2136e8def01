"""The captured step (``Trainer(compile_step=...)``) against the eager hand loop, the eager Trainer beside it.

    python benchmarks/bench_captured.py [--rounds 5] [--steps 200] [--warmup 30] [--workloads mlp transformer]
                                        [--mode reduce-overhead] [--precision bf16-mixed] [--adamw fused] [--tiny]

Two workloads of issue 24: a tiny MLP 32-64-4 at batch 64 (framework overhead dominates) and an 8-layer transformer
encoder, d512, sequence 512, batch 32 (compute dominates); ``--tiny`` shrinks the transformer (and the step counts)
so that the script runs on a CPU in a minute or two, which proves it runs, not a speed.

Contenders, each training the same network on the same pinned DataLoader with AdamW and ``self.log("loss", loss)``
every step (progress bar, logger, checkpoints and model summary off):

* ``hand``: a hand-written eager PyTorch loop (autocast for a ``*-mixed`` precision);
* ``accelkit``: ``accelkit.Trainer`` with the eager step;
* ``captured``: ``accelkit.Trainer(compile_step={"mode": MODE})`` (``--mode``; default ``reduce-overhead`` on a
  GPU, torch.compile's default mode on a CPU);
* with ``--hand-compiled``: the hand loop with its loss and optimizer step compiled with the same options, the
  floor a captured step can hope for.

A contender's time is its steady per-step time inside one fit: the clock is read (after a device synchronisation)
at the start of step ``--warmup`` and at the end of the fit, so compilation and the first steps are excluded. Every
round runs each contender once, the order rotated from round to round; a contender's ratio is its time over the
hand loop's of the same round, and the script prints the median ratio and its spread (lowest-highest) over the
rounds. Each captured fit compiles afresh (``torch._dynamo.reset()`` first), as a new process would.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit

WORKLOADS = ("mlp", "transformer")


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Transformer(nn.Module):
    """A pre-norm transformer encoder over given embeddings, mean-pooled into a linear classifier."""

    def __init__(self, d_model: int, layers: int, classes: int) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, nhead=max(1, d_model // 64), dim_feedforward=4 * d_model,
                                           dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(dim=1))


def workload(name: str, tiny: bool) -> dict[str, Any]:
    """The network maker, its data and batch size for ``name``."""
    generator = torch.Generator().manual_seed(0)
    if name == "mlp":
        def make() -> nn.Module:
            return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
        x = torch.randn(64 * 64, 32, generator=generator)
        return {"label": "tiny MLP 32-64-4, batch 64", "make": make, "batch": 64,
                "data": TensorDataset(x, torch.randint(0, 4, (len(x),), generator=generator))}
    d, layers, seq, batch = (32, 1, 16, 4) if tiny else (512, 8, 512, 32)

    def make_transformer() -> nn.Module:
        return Transformer(d, layers, 10)
    x = torch.randn(batch * 8, seq, d, generator=generator)
    return {"label": f"{layers}-layer transformer d{d}, seq {seq}, batch {batch}", "make": make_transformer,
            "batch": batch, "data": TensorDataset(x, torch.randint(0, 10, (len(x),), generator=generator))}


def loader(spec: dict[str, Any], device: torch.device) -> DataLoader:
    """The same loader for every contender (pinned on a GPU, as a user's would be)."""
    return DataLoader(spec["data"], batch_size=spec["batch"], shuffle=False, drop_last=True,
                      pin_memory=device.type == "cuda")


def optimizer_for(parameters: Any, spec: dict[str, Any]) -> torch.optim.Optimizer:
    """AdamW: its fused kernel where ``spec["fused"]`` (the fastest eager step on a GPU), else torch's default."""
    return torch.optim.AdamW(parameters, lr=1e-3, fused=spec["fused"] or None)


def _batches(data: DataLoader) -> Any:
    while True:
        yield from data


def hand_loop(spec: dict[str, Any], args: argparse.Namespace, device: torch.device) -> float:
    """The eager hand-written loop; returns its steady seconds per step."""
    torch.manual_seed(0)
    net = spec["make"]().to(device)
    optimizer = optimizer_for(net.parameters(), spec)
    dtype = torch.bfloat16 if args.precision == "bf16-mixed" else None
    batches, start = _batches(loader(spec, device)), 0.0
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            synchronize(device)
            start = time.perf_counter()
        x, y = (t.to(device, non_blocking=True) for t in next(batches))
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(net(x), y)
        loss.detach()  # what self.log does with the value
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(device)
    return (time.perf_counter() - start) / args.steps


def hand_compiled(options: dict[str, Any]) -> Callable[[dict[str, Any], argparse.Namespace, torch.device], float]:
    """A contender: the hand loop with its loss and its optimizer step compiled with ``torch.compile(**options)``
    (what a user would write by hand; the floor the captured step can hope for)."""
    def run(spec: dict[str, Any], args: argparse.Namespace, device: torch.device) -> float:
        torch._dynamo.reset()
        torch.manual_seed(0)
        net = spec["make"]().to(device)
        optimizer = optimizer_for(net.parameters(), spec)
        dtype = torch.bfloat16 if args.precision == "bf16-mixed" else None
        graphs = options.get("mode") in ("reduce-overhead", "max-autotune")
        loss_of = torch.compile(lambda x, y: F.cross_entropy(net(x), y), **options)
        step = torch.compile(optimizer.step, **{k: v for k, v in options.items() if k != "fullgraph"})
        batches, start = _batches(loader(spec, device)), 0.0
        for index in range(args.warmup + args.steps):
            if index == args.warmup:
                synchronize(device)
                start = time.perf_counter()
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            x, y = (t.to(device, non_blocking=True) for t in next(batches))
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = loss_of(x, y)
            loss.detach()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            step()
        synchronize(device)
        return (time.perf_counter() - start) / args.steps
    return run


class BenchModule(accelkit.Module):
    """The accelkit side: the same network, loss, optimizer and loader as :func:`hand_loop`."""

    def __init__(self, spec: dict[str, Any], device: torch.device) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = spec["make"]()
        self.spec, self.bench_device = spec, device

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return optimizer_for(self.parameters(), self.spec)

    def train_dataloader(self) -> DataLoader:
        return loader(self.spec, self.bench_device)


class SteadyClock(accelkit.Callback):
    """Reads the clock at the start of step ``warmup`` and at the end of training (after a device sync)."""

    def __init__(self, warmup: int, device: torch.device) -> None:
        self.warmup, self.device = warmup, device
        self.start = self.end = 0.0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.warmup:
            synchronize(self.device)
            self.start = time.perf_counter()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        synchronize(self.device)
        self.end = time.perf_counter()


def trainer_run(compile_step: Any) -> Callable[[dict[str, Any], argparse.Namespace, torch.device], float]:
    """A contender fitting :class:`BenchModule` with ``compile_step``; returns its steady seconds per step."""
    def run(spec: dict[str, Any], args: argparse.Namespace, device: torch.device) -> float:
        if compile_step:
            torch._dynamo.reset()  # compile afresh, as a new process would (and stay under the recompile limit)
        clock = SteadyClock(args.warmup, device)
        trainer = accelkit.Trainer(accelerator=device.type, devices=1, precision=args.precision,
                                   max_steps=args.warmup + args.steps, logger=False, enable_progress_bar=False,
                                   enable_checkpointing=False, enable_model_summary=False, callbacks=[clock],
                                   compile_step=compile_step)
        trainer.fit(BenchModule(spec, device))
        return (clock.end - clock.start) / args.steps
    return run


def measure(spec: dict[str, Any], args: argparse.Namespace, device: torch.device,
            contenders: dict[str, Callable]) -> dict[str, list[float]]:
    """Seconds per step of every contender, per round, the order rotated from round to round."""
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        order = names[shift:] + names[:shift]
        for name in order:
            times[name].append(contenders[name](spec, args, device))
        print(f"  round {round_ + 1}/{args.rounds}: " + ", ".join(
            f"{name} {times[name][-1] * 1e3:.3f}" for name in order) + " ms/step", flush=True)
    return times


def report(label: str, times: dict[str, list[float]]) -> list[str]:
    """One line per contender: the hand loop's median time, the others' median ratio and its spread."""
    hand = times["hand"]
    lines = [f"{label}: hand loop {statistics.median(hand) * 1e3:.3f} ms/step (median of {len(hand)} rounds)"]
    for name, values in times.items():
        if name == "hand":
            continue
        ratios = sorted(v / h for v, h in zip(values, hand))
        lines.append(f"  {name:<30} {statistics.median(ratios):.3f}x the hand loop "
                     f"(rounds {ratios[0]:.3f}-{ratios[-1]:.3f}; {statistics.median(values) * 1e3:.3f} ms/step)")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Measure and print; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=("cuda", "cpu"))
    parser.add_argument("--mode", default=None, help="torch.compile mode of the captured step (default: "
                        "reduce-overhead on a GPU, torch.compile's default on a CPU)")
    parser.add_argument("--precision", default=None, help="default: bf16-mixed on a GPU, 32-true on a CPU")
    parser.add_argument("--adamw", choices=("fused", "foreach"), default=None,
                        help="AdamW's implementation for every contender (default: fused on a GPU, foreach on a CPU)")
    parser.add_argument("--hand-compiled", action="store_true",
                        help="also time the hand loop with its loss and optimizer step compiled by hand")
    parser.add_argument("--tiny", action="store_true", help="small transformer and few steps: proves it runs")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_captured: --device cuda, but no NVIDIA GPU is visible; use --device cpu", file=sys.stderr)
        return 2
    args.precision = args.precision or ("bf16-mixed" if device.type == "cuda" else "32-true")
    mode = args.mode or ("reduce-overhead" if device.type == "cuda" else None)
    options = {"mode": mode} if mode else True
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; accelkit {accelkit.__version__}; {args.precision}; "
          f"AdamW {args.adamw or ('fused' if device.type == 'cuda' else 'foreach')}; "
          f"{args.steps} steps after {args.warmup}; {args.rounds} rounds, order rotated; captured step: "
          f"compile_step={options!r}")
    contenders = {"hand": hand_loop, "accelkit": trainer_run(False),
                  f"accelkit compile_step={options!r}": trainer_run(options)}
    if args.hand_compiled:
        contenders[f"hand, torch.compile({options if options is not True else ''})"] = hand_compiled(
            options if options is not True else {})
    for key in args.workloads:
        spec = workload(key, args.tiny)
        spec["fused"] = (args.adamw or ("fused" if device.type == "cuda" else "foreach")) == "fused"
        for line in report(spec["label"], measure(spec, args, device, contenders)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
