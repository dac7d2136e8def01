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

For each compiled contender the script then prints what ``torch.compile`` did in its last fit (the structure that
explains a time): the graphs compiled and the graph breaks, the frames compiled during the timed steps (a recompile
there is a cost no warm-up hides), inductor's CUDA-graph skips, and the CUDA graphs recorded, in all and during the
timed steps (a graph recorded again and again is a fresh graph per step).
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
Result = tuple[float, "CompileWindow | None"]  # a contender's steady seconds per step, and what it compiled


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compile_counts(device: torch.device) -> dict[str, int]:
    """``torch.compile``'s counters so far in this process: graphs, graph breaks, frames compiled, CUDA-graph
    skips, and the CUDA graphs recorded on ``device`` (see :func:`cudagraphs_recorded`)."""
    counters = torch._dynamo.utils.counters
    return {"graphs": counters["stats"]["unique_graphs"], "graph breaks": sum(counters["graph_break"].values()),
            "frames": counters["frames"]["total"], "cudagraph skips": counters["inductor"]["cudagraph_skips"],
            "cudagraphs": cudagraphs_recorded(device)}


def cudagraphs_recorded(device: torch.device) -> int:
    """The CUDA graphs recorded so far by inductor's CUDA-graph trees on ``device`` (the nodes of its trees;
    -1 where this torch keeps them elsewhere, 0 on a CPU)."""
    if device.type != "cuda":
        return 0
    from torch._inductor import cudagraph_trees

    try:
        manager = cudagraph_trees.get_manager(device.index or 0, create_if_none_exists=False)
        nodes = list(manager.get_roots()) if manager is not None else []
        count = 0
        while nodes:
            node = nodes.pop()
            count += 1
            nodes.extend(child for children in node.children.values() for child in children)
    except (AttributeError, TypeError):  # a private API: another torch may name it otherwise
        return -1
    return count


class CompileWindow:
    """:func:`compile_counts` at a fit's start, at the start of its timed steps and at its end (while its
    compiled functions are alive: inductor lets a CUDA-graph tree go with the last of them)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.marks: list[dict[str, int]] = [compile_counts(device)]

    def mark(self) -> None:
        """Take the counts now."""
        self.marks.append(compile_counts(self.device))

    def summary(self) -> str:
        """One line: what the fit compiled, and what it compiled or recorded during the timed steps."""
        start, timed, end = self.marks[0], self.marks[1], self.marks[-1]
        fit = {key: end[key] - start[key] for key in end}
        # the CUDA graphs are counted in the tree at the end (the tree of an earlier fit may have been let go)
        return (f"{fit['graphs']} graphs, {fit['graph breaks']} graph breaks, {fit['cudagraph skips']} CUDA-graph "
                f"skips, {end['cudagraphs']} CUDA graphs recorded; during the timed steps "
                f"{end['frames'] - timed['frames']} frames compiled, {end['cudagraphs'] - timed['cudagraphs']} CUDA "
                "graphs recorded")


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


def hand_loop(spec: dict[str, Any], args: argparse.Namespace, device: torch.device) -> Result:
    """The eager hand-written loop; returns its steady seconds per step (and ``None``: it compiles nothing)."""
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
    return (time.perf_counter() - start) / args.steps, None


def hand_compiled(options: dict[str, Any]) -> Callable[[dict[str, Any], argparse.Namespace, torch.device], Result]:
    """A contender: the hand loop with its loss and its optimizer step compiled with ``torch.compile(**options)``
    (what a user would write by hand; the floor the captured step can hope for)."""
    def run(spec: dict[str, Any], args: argparse.Namespace, device: torch.device) -> Result:
        torch._dynamo.reset()
        window = CompileWindow(device)
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
                window.mark()
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
        seconds = (time.perf_counter() - start) / args.steps
        window.mark()
        return seconds, window
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

    def __init__(self, warmup: int, device: torch.device, window: CompileWindow | None) -> None:
        self.warmup, self.device, self.window = warmup, device, window
        self.start = self.end = 0.0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.warmup:
            synchronize(self.device)
            if self.window is not None:
                self.window.mark()
            self.start = time.perf_counter()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        synchronize(self.device)
        self.end = time.perf_counter()
        if self.window is not None:  # while the compiled calls (and their CUDA-graph tree) are alive
            self.window.mark()


def trainer_run(compile_step: Any) -> Callable[[dict[str, Any], argparse.Namespace, torch.device], Result]:
    """A contender fitting :class:`BenchModule` with ``compile_step``; returns its steady seconds per step and,
    for a captured step, what it compiled."""
    def run(spec: dict[str, Any], args: argparse.Namespace, device: torch.device) -> Result:
        window = None
        if compile_step:
            torch._dynamo.reset()  # compile afresh, as a new process would (and stay under the recompile limit)
            window = CompileWindow(device)
        clock = SteadyClock(args.warmup, device, window)
        trainer = accelkit.Trainer(accelerator=device.type, devices=1, precision=args.precision,
                                   max_steps=args.warmup + args.steps, logger=False, enable_progress_bar=False,
                                   enable_checkpointing=False, enable_model_summary=False, callbacks=[clock],
                                   compile_step=compile_step)
        trainer.fit(BenchModule(spec, device))
        return (clock.end - clock.start) / args.steps, window
    return run


def measure(spec: dict[str, Any], args: argparse.Namespace, device: torch.device,
            contenders: dict[str, Callable]) -> tuple[dict[str, list[float]], dict[str, CompileWindow]]:
    """Seconds per step of every contender, per round, the order rotated from round to round; and what each
    compiled contender compiled in its last fit."""
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    windows: dict[str, CompileWindow] = {}
    for round_ in range(args.rounds):
        shift = round_ % len(names)
        order = names[shift:] + names[:shift]
        for name in order:
            seconds, window = contenders[name](spec, args, device)
            times[name].append(seconds)
            if window is not None:
                windows[name] = window
        print(f"  round {round_ + 1}/{args.rounds}: " + ", ".join(
            f"{name} {times[name][-1] * 1e3:.3f}" for name in order) + " ms/step", flush=True)
    return times, windows


def report(label: str, times: dict[str, list[float]]) -> list[str]:
    """One line per contender: the hand loop's median time, the others' median ratio and its spread."""
    hand = times["hand"]
    lines = [f"{label}: hand loop {statistics.median(hand) * 1e3:.3f} ms/step (median of {len(hand)} rounds)"]
    for name, values in times.items():
        if name == "hand":
            continue
        ratios = sorted(v / h for v, h in zip(values, hand, strict=True))
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
        times, windows = measure(spec, args, device, contenders)
        for line in report(spec["label"], times):
            print(line, flush=True)
        for name, window in windows.items():
            print(f"  {name} compiled: {window.summary()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
