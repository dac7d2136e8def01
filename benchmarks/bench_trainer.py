"""Steady-state cost of one training step: accelkit's Trainer against hand-written PyTorch loops.

Comparisons, each reported as ratios measured in one run:

``single``: one CPU process, the tiny MLP. Sides: a hand-written loop; the Trainer with the default progress bar
("trainer", target <= 1.03x); the same with the module calling ``self.log("train_loss", loss, prog_bar=True)``
every step ("trainer+log", target <= 1.05x). With ``--bar-cost`` a fourth side runs the Trainer without the bar
("no bar"), and the table adds the bar's own cost (trainer / no bar). The bar is the real ``TQDMProgressBar``
callback; its output (standard output) and stderr go to ``/dev/null`` while the Trainer runs so that the terminal
does not add its own cost to the timing.

The same two ratios are also measured with *paired epochs*: in each Trainer run a callback runs one epoch of
the hand-written loop (its own copy of the model, the same loader) right before every Trainer epoch, so the two
epochs of a pair meet the same machine load; the ratio of each pair, median over the epochs and then over the
rounds, is much less disturbed by a shared machine than the side-by-side runs.

``opcodes``: the Python instructions per step the Trainer adds to a hand-written loop (``sys.settrace`` opcode
events on a module whose step is one multiplication, bar on with its redraws left out, with and without
``self.log``). A count, not a clock: the same on a loaded machine, so it shows what a change to the step path does.

``ddp``: two processes on the CPU (gloo). Sides: ``Trainer(strategy="ddp_spawn", devices=2)`` (bar + log as
above; the bar draws on rank 0) against a hand-written two-process DDP loop started with
``torch.multiprocessing`` (``DistributedSampler``, ``DistributedDataParallel``, the same model, data, batch
size and Adam, and the same intra-op thread count per process as ``ddp_spawn`` gives its workers). Target
<= 1.05x. Times are taken inside the workers and rank 0's are reported. This is the Trainer's step on a wide
MLP (width 256, whose arithmetic hides most of the framework), its fastest epoch, timed between its epoch hooks
(the epoch's start and end work outside): for what a user's DDP run costs (issue 24's tiny MLP, every epoch's
whole time, medians, counts of operators, collectives and Python instructions per step) use
``benchmarks/bench_ddp.py``.

The Trainer sides run without a logger, checkpointing, model summary or validation (per-epoch or optional
costs the hand-written loops do not have). Each measurement trains ``--epochs`` epochs, skips the first
(warm-up) and keeps the fastest of the others (on a shared machine interference only adds time), as seconds
per step. Two clocks: wall time (the result) and the CPU time of the measuring process (rank 0's for DDP),
which a busy machine disturbs less. The sides are interleaved and their order rotates every round, so machine
load hits all alike; the tables show medians over rounds and the per-round ratios (median ratio is the result).

    .venv/bin/python benchmarks/bench_trainer.py [--rounds 9] [--epochs 5] [--width 256]
                                                 [--only single|ddp|opcodes] [--bar-cost]
                                                 [--against OTHER/core/src] [--json PATH]

``--against`` compares two versions of accelkit (a change to the step path, say): each round runs the chosen
comparisons once in a child process importing accelkit from the given folder ("before"; ``git worktree add`` or
``git archive`` the old commit) and once importing it from this tree ("after"), alternating which goes first, and
reports both trees' medians and the per-round after / before.

On a small shared machine set ``OMP_NUM_THREADS=1``: intra-op threads spinning against other processes' load
make wall times erratic (tens of milliseconds per step with two threads on two busy cores).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import accelkit

BATCH_SIZE = 64
SAMPLES = 8192  # 128 steps per epoch in one process, 64 per rank with two


def make_data(n: int = SAMPLES, seed: int = 0) -> TensorDataset:
    """Synthetic 64-feature, 10-class data (the digits example's shapes, larger)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 64, generator=generator)
    y = torch.randint(0, 10, (n,), generator=generator)
    return TensorDataset(x, y)


def make_net(width: int) -> nn.Module:
    """The MLP every side trains."""
    return nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


class BenchModule(accelkit.Module):
    """The MLP as an accelkit Module; logs its loss every step (shown on the bar) like a real module."""

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
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def clock() -> tuple[float, float]:
    """Wall time and this process's CPU time, in seconds."""
    return time.perf_counter(), time.process_time()


def elapsed(start: tuple[float, float]) -> tuple[float, float]:
    """Wall and CPU seconds since ``start`` (a :func:`clock` reading)."""
    wall, cpu = clock()
    return wall - start[0], cpu - start[1]


class EpochTimer(accelkit.Callback):
    """Wall and CPU time of every training epoch; with ``path``, rank 0 writes them there as JSON at the end."""

    def __init__(self, path: str | None = None) -> None:
        self.times: list[tuple[float, float]] = []
        self.path = path
        self._start = (0.0, 0.0)

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self._start = clock()

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.times.append(elapsed(self._start))

    def on_train_end(self, trainer: Any, module: Any) -> None:
        if self.path is not None and trainer.global_rank == 0:
            Path(self.path).write_text(json.dumps({"times": self.times, "steps": trainer.num_training_batches}))


@contextlib.contextmanager
def output_to_devnull() -> Iterator[None]:
    """Send file descriptors 1 and 2 (the progress bar's output, gloo's lines) to /dev/null for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def steady(times: list[Any], steps: int) -> tuple[float, float]:
    """Seconds per step, wall and CPU: the fastest epoch after the warm-up one, by each clock."""
    timed = times[1:]
    return min(t[0] for t in timed) / steps, min(t[1] for t in timed) / steps


def quiet_trainer(epochs: int, callbacks: list[Any], bar: bool = True, **kwargs: Any) -> accelkit.Trainer:
    """A Trainer with the bar on (unless ``bar`` is false) and the per-epoch extras off."""
    return accelkit.Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_progress_bar=bar,
                            enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0,
                            callbacks=callbacks, **kwargs)


# ------------------------------------------------------------------------------------------ one process
def trainer_single(loader: DataLoader, width: int, epochs: int, log: bool, bar: bool = True) -> tuple[float, float]:
    """Seconds per step of the Trainer in this process (``bar``: the progress bar on; ``log``: the module logs
    every step)."""
    timer = EpochTimer()
    trainer = quiet_trainer(epochs, [timer], bar=bar, devices=1)
    torch.manual_seed(0)
    module = BenchModule(width, log)
    with output_to_devnull():
        trainer.fit(module, train_dataloaders=loader)
    return steady(timer.times, len(loader))


def loop_epoch(net: nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader) -> tuple[float, float]:
    """One epoch of the hand-written loop; its wall and CPU seconds."""
    start = clock()
    for x, y in loader:
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return elapsed(start)


def loop_single(loader: DataLoader, width: int, epochs: int) -> tuple[float, float]:
    """Seconds per step of the hand-written loop in this process."""
    torch.manual_seed(0)
    net = BenchModule(width, log=False)  # the same module class, called as a plain nn.Module
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.train()
    times = [loop_epoch(net, optimizer, loader) for _ in range(epochs)]
    return steady(times, len(loader))


class PairedLoop(accelkit.Callback):
    """Runs one epoch of the hand-written loop (its own copy of the model and optimizer, the same loader) right
    before each Trainer epoch, in the same process, so that both epochs of a pair meet the same machine load;
    records ``(Trainer epoch, loop epoch)`` wall and CPU seconds."""

    def __init__(self, loader: DataLoader, width: int) -> None:
        self.loader = loader
        self.net = BenchModule(width, log=False)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)
        self.pairs: list[tuple[tuple[float, float], tuple[float, float]]] = []
        self._loop = self._start = (0.0, 0.0)

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self._loop = loop_epoch(self.net, self.optimizer, self.loader)
        self._start = clock()

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.pairs.append((elapsed(self._start), self._loop))


def paired_single(loader: DataLoader, width: int, epochs: int, log: bool) -> tuple[float, float]:
    """The Trainer (bar on; ``log``: ``self.log`` every step) with :class:`PairedLoop`: the median, over the epochs
    after the warm-up one, of Trainer epoch / loop epoch, by wall and by CPU time."""
    torch.manual_seed(0)
    paired = PairedLoop(loader, width)
    trainer = quiet_trainer(epochs, [paired], devices=1)
    with output_to_devnull():
        trainer.fit(BenchModule(width, log), train_dataloaders=loader)
    pairs = paired.pairs[1:]
    return (statistics.median(t[0] / lp[0] for t, lp in pairs), statistics.median(t[1] / lp[1] for t, lp in pairs))


# ------------------------------------------------------------------------------------------ framework work
class TinyModule(accelkit.Module):
    """A step of almost no arithmetic (one weight), so that the framework's own work per step is what differs."""

    def __init__(self, log: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))
        self.do_log = log

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = (self.weight * batch[0]).sum()
        if self.do_log:
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class Batches:
    """The same in-memory batch ``steps`` times, with a length (no data loading in the measurement)."""

    def __init__(self, steps: int) -> None:
        self.items = [(torch.ones(4),)] * steps

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)


class OpcodeCounter(accelkit.Callback):
    """Counts the Python bytecode instructions run during the second training epoch (``sys.settrace`` with
    opcode events: deterministic, unlike a clock on a loaded machine), in all and per function (``by_code``).
    Other users set ``counting`` themselves (``bench_cuda.py`` counts a span of steps)."""

    def __init__(self) -> None:
        self.count = 0
        self.calls = 0  # function calls and generator resumptions ("call" events)
        self.counting = False
        self.by_code: collections.Counter[Any] = collections.Counter()

    def install(self) -> None:
        """``sys.settrace(self.trace)`` with opcode events on. Python 3.12 turns opcode events on when
        ``sys.settrace`` is called only if some frame already asked for them (``f_trace_opcodes``), so a first
        counted run saw calls but no instruction there; the caller's frame asks first (harmless elsewhere: that
        frame has no trace function). :meth:`trace` turns them on for every frame it sees."""
        sys._getframe(1).f_trace_opcodes = True
        sys.settrace(self.trace)

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode" and self.counting:
            self.count += 1
            self.by_code[frame.f_code] += 1
        elif event == "call" and self.counting:
            self.calls += 1
        return self.trace

    def per_function(self, steps: int) -> dict[str, float]:
        """Instructions per step of each function (``file:qualified name``, paths from the package down)."""
        result: collections.Counter[str] = collections.Counter()
        for code, n in self.by_code.items():
            result[f"{short_path(code.co_filename)}:{getattr(code, 'co_qualname', code.co_name)}"] += n
        return {name: n / steps for name, n in result.items()}

    def per_step(self, steps: int, side: str) -> tuple[float, float]:
        """``(instructions, calls)`` per step of ``side`` over ``steps`` counted steps. Refuses (``RuntimeError``)
        when nothing was counted: a side that ran a step ran Python, so a zero means the trace function saw none of
        its frames (e.g. a frame evaluator installed by ``torch.compile`` earlier in the same process), not that
        the side is free."""
        if self.count == 0 or self.calls == 0:
            raise RuntimeError(f"the instruction counter saw {self.count} Python instructions and {self.calls} calls "
                               f"over {steps} steps of {side!r}, which ran: sys.settrace did not see its frames "
                               "(count in a process where nothing was compiled, as bench_cuda.py does)")
        return self.count / steps, self.calls / steps

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.counting = trainer.current_epoch == 1

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.counting = False


def short_path(path: str) -> str:
    """A source file as the per-function listings name it: a package's path from the package down, a script's
    name."""
    if "-packages/" in path or "/src/" in path:
        return path.rsplit("site-packages/", 1)[-1].rsplit("src/", 1)[-1]
    return os.path.basename(path)


def extra_functions(ours: dict[str, float], theirs: dict[str, float], top: int = 12) -> list[tuple[str, float]]:
    """The functions whose instructions per step differ most between two :meth:`OpcodeCounter.per_function`
    results, as ``(function, ours minus theirs)``, largest difference first."""
    extra = {name: ours.get(name, 0.0) - theirs.get(name, 0.0) for name in set(ours) | set(theirs)}
    return [(name, extra[name]) for name in sorted(extra, key=lambda n: (-abs(extra[n]), n))[:top]
            if abs(extra[name]) >= 0.5]


def framework_opcodes(steps: int = 200) -> dict[str, float]:
    """Python instructions per step, beyond a hand-written loop's, of the Trainer (bar on, its redraws left
    out), with and without ``self.log``, on :class:`TinyModule`."""
    from accelkit.callbacks import TQDMProgressBar

    class UndrawnBar(TQDMProgressBar):
        """The default bar, whose training line is never redrawn: a redraw happens at most ten times a second, so
        how many fall into a traced (slow) epoch depends on the clock, not on the steps. Each batch takes the path
        of a batch between two redraws."""

        def init_train_tqdm(self) -> Any:
            bar = super().init_train_tqdm()
            bar.mininterval = bar.miniters = float("inf")
            return bar

    batches = Batches(steps)
    counter = OpcodeCounter()
    module = TinyModule(log=False)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.0)
    counter.install()
    counter.counting = True
    for batch_idx, batch in enumerate(batches):
        loss = module.training_step(batch, batch_idx)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    counter.counting = False
    sys.settrace(None)
    result = {"loop": counter.per_step(steps, "hand-written loop")[0]}
    for name, log in (("trainer", False), ("trainer+log", True)):
        counter = OpcodeCounter()
        trainer = quiet_trainer(2, [counter, UndrawnBar()], devices=1)
        counter.install()  # before the fit, so the loop's own frames are traced too
        try:
            with output_to_devnull():
                trainer.fit(TinyModule(log), train_dataloaders=batches)
        finally:
            sys.settrace(None)
        result[name] = counter.per_step(steps, name)[0] - result["loop"]
    return result


# ------------------------------------------------------------------------------------------ two processes
def _loop_ddp_worker(rank: int, world: int, port: int, width: int, epochs: int, path: str) -> None:
    """One rank of the hand-written DDP loop (rank 0 writes its epoch times to ``path``)."""
    import torch.distributed as dist
    from torch.utils.data import DistributedSampler

    if "OMP_NUM_THREADS" not in os.environ:  # the thread count ddp_spawn gives its workers
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        dataset = make_data()
        sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
        loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(BenchModule(width, log=False))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        model.train()
        times = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            times.append(loop_epoch(model, optimizer, loader))
        if rank == 0:
            Path(path).write_text(json.dumps({"times": times, "steps": len(loader)}))
    finally:
        dist.destroy_process_group()


def loop_ddp(width: int, epochs: int, world: int = 2) -> tuple[float, float]:
    """Seconds per step of rank 0 of the hand-written DDP loop."""
    import torch.multiprocessing as mp

    from accelkit.strategies.ddp import find_free_port

    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        path = os.path.join(tmp, "times.json")
        with output_to_devnull():  # gloo's connection lines, as on the Trainer side
            mp.start_processes(_loop_ddp_worker, args=(world, find_free_port(), width, epochs, path), nprocs=world,
                               join=True, start_method="spawn")
        result = json.loads(Path(path).read_text())
    return steady(result["times"], result["steps"])


def trainer_ddp(width: int, epochs: int, world: int = 2) -> tuple[float, float]:
    """Seconds per step of rank 0 of ``Trainer(strategy="ddp_spawn")`` (bar + log)."""
    loader = DataLoader(make_data(), batch_size=BATCH_SIZE, shuffle=True)
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        path = os.path.join(tmp, "times.json")
        trainer = quiet_trainer(epochs, [EpochTimer(path)], devices=world, strategy="ddp_spawn")
        torch.manual_seed(0)
        with output_to_devnull():
            trainer.fit(BenchModule(width, log=True), train_dataloaders=loader)
        result = json.loads(Path(path).read_text())
    return steady(result["times"], result["steps"])


# ------------------------------------------------------------------------------------------ driver
def interleave(sides: dict[str, Callable[[], tuple[float, float]]], rounds: int,
               unit: str = "ms wall/cpu") -> dict[str, list[tuple]]:
    """Run every side once per round, rotating their order each round; ``(wall, cpu)`` of each (seconds per
    step, or ratios with ``unit="ratio wall/cpu"``)."""
    names = list(sides)
    results: dict[str, list[tuple]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        order = names[shift:] + names[:shift]
        for name in order:
            results[name].append(sides[name]())
        scale = 1e3 if unit.startswith("ms") else 1.0
        print(f"  round {r + 1}/{rounds} ({' > '.join(order)}): " + ", ".join(
            f"{n} {scale * results[n][-1][0]:.3f}/{scale * results[n][-1][1]:.3f}" for n in names) + f" {unit}",
            flush=True)
    return results


def report(results: dict[str, list[tuple]], baseline: str, targets: dict[str, float]) -> None:
    """Median per-step times, and each side's per-round ratios to ``baseline`` with their median, per clock."""
    for clock_index, clock_name in ((0, "wall"), (1, "cpu")):
        base = [v[clock_index] for v in results[baseline]]
        for name, values in results.items():
            per_step = statistics.median(v[clock_index] for v in values)
            print(f"  {clock_name:<4} {name:<12}: {1e3 * per_step:.3f} ms/step (median)")
        for name, values in results.items():
            if name == baseline:
                continue
            ratios = [v[clock_index] / b for v, b in zip(values, base, strict=True)]
            target = f"  target <= {targets[name]:.2f}" if name in targets else ""
            print(f"  {clock_name:<4} ratio {name}/{baseline}: {statistics.median(ratios):.3f}{target}  "
                  f"(per round: {', '.join(f'{x:.3f}' for x in ratios)})")


def run_comparisons(args: argparse.Namespace) -> dict[str, Any]:
    """Run the chosen comparisons, printing each as it ends; their results (per side, one entry per round)."""
    found: dict[str, Any] = {"accelkit": os.path.dirname(accelkit.__file__)}
    print(f"torch {torch.__version__}, accelkit {accelkit.__version__} ({found['accelkit']}), {os.cpu_count()} cores; "
          f"MLP width {args.width}, batch {BATCH_SIZE}, {SAMPLES} samples; fastest of {args.epochs - 1} epochs after "
          f"a warm-up one, {args.rounds} rounds, order rotated each round", flush=True)
    if args.only in (None, "opcodes"):
        counts = found["opcodes"] = framework_opcodes()
        print(f"Python instructions per step (deterministic): hand-written loop {counts['loop']:.0f}; the Trainer "
              f"adds {counts['trainer']:.0f} (bar on), {counts['trainer+log']:.0f} with self.log", flush=True)
    if args.only in (None, "single"):
        loader = DataLoader(make_data(), batch_size=BATCH_SIZE, shuffle=True)
        print(f"one process, {torch.get_num_threads()} threads, {len(loader)} steps/epoch:", flush=True)
        sides = {
            "loop": lambda: loop_single(loader, args.width, args.epochs),
            "trainer": lambda: trainer_single(loader, args.width, args.epochs, log=False),
            "trainer+log": lambda: trainer_single(loader, args.width, args.epochs, log=True),
        }
        if args.bar_cost:
            sides["no bar"] = lambda: trainer_single(loader, args.width, args.epochs, log=False, bar=False)
        results = found["single"] = interleave(sides, args.rounds)
        report(results, "loop", {"trainer": 1.03, "trainer+log": 1.05})
        if args.bar_cost:
            print("the progress bar's cost (Trainer with the bar / without it):")
            report({"no bar": results["no bar"], "trainer": results["trainer"]}, "no bar", {})
        print("paired epochs (each Trainer epoch right after a hand-written epoch in the same process; ratio of the "
              "pair, median over epochs, then over rounds):", flush=True)
        paired = found["paired"] = interleave({
            "trainer": lambda: paired_single(loader, args.width, args.epochs, log=False),
            "trainer+log": lambda: paired_single(loader, args.width, args.epochs, log=True),
        }, args.rounds, unit="ratio wall/cpu")
        for clock_index, clock_name in ((0, "wall"), (1, "cpu")):
            for name, target in (("trainer", 1.03), ("trainer+log", 1.05)):
                ratios = [v[clock_index] for v in paired[name]]
                print(f"  {clock_name:<4} ratio {name}/loop: {statistics.median(ratios):.3f}  target <= {target:.2f}  "
                      f"(per round: {', '.join(f'{x:.3f}' for x in ratios)})")
    if args.only in (None, "ddp"):
        print("two processes (gloo), rank 0's time per step:", flush=True)
        results = found["ddp"] = interleave({
            "ddp loop": lambda: loop_ddp(args.width, args.epochs),
            "ddp_spawn": lambda: trainer_ddp(args.width, args.epochs),
        }, args.rounds)
        report(results, "ddp loop", {"ddp_spawn": 1.05})
    return found


# ------------------------------------------------------------------------------------------ before and after
def run_child(args: argparse.Namespace, source: str | None) -> dict[str, Any]:
    """One round of the chosen comparisons in a child process importing accelkit from ``source`` (a ``core/src``
    folder) or, with ``None``, from where this process imports it; its results."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="bench-against-") as tmp:
        path = os.path.join(tmp, "results.json")
        command = [sys.executable, os.path.abspath(__file__), "--rounds", "1", "--epochs", str(args.epochs),
                   "--width", str(args.width), "--json", path] + (["--only", args.only] if args.only else []) + \
                  (["--bar-cost"] if args.bar_cost else [])
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        found = json.loads(Path(path).read_text())
    expected = os.path.realpath(source if source is not None else os.path.dirname(os.path.dirname(accelkit.__file__)))
    if not os.path.realpath(found["accelkit"]).startswith(expected + os.sep):
        raise RuntimeError(f"the child imported accelkit from {found['accelkit']}, not from {expected}: give --against "
                           "a folder holding the accelkit package (a checkout's core/src)")
    return found


def against(args: argparse.Namespace) -> None:
    """``--against SOURCE``: each round runs the chosen comparisons once with accelkit from ``SOURCE`` ("before")
    and once from this tree ("after"), in child processes, alternating which goes first; then the medians of both
    and, per round, after / before."""
    source = os.path.abspath(args.against)
    print(f"before: accelkit from {source}; after: accelkit from {os.path.dirname(accelkit.__file__)}; "
          f"{args.rounds} rounds, one child process per tree and round, the order alternating", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        for tree in (("before", "after") if r % 2 == 0 else ("after", "before")):
            runs[tree].append(run_child(args, source if tree == "before" else None))
        print(f"  round {r + 1}/{args.rounds} done", flush=True)
    report_against(runs["before"], runs["after"])


def report_against(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """Medians over the rounds of each tree's per-step times and ratios, and of the per-round after / before."""
    if "opcodes" in after[0]:
        print("Python instructions per step beyond the hand-written loop (deterministic), before -> after: "
              + ", ".join(f"{side} {before[0]['opcodes'][side]:.0f} -> {after[0]['opcodes'][side]:.0f}"
                          for side in after[0]["opcodes"] if side != "loop"))
    for comparison, baseline in (("single", "loop"), ("ddp", "ddp loop")):
        if comparison not in after[0]:
            continue
        for clock_index, clock_name in ((0, "wall"), (1, "cpu")):
            for side in after[0][comparison]:
                line = [f"  {clock_name:<4} {side:<12}"]
                for tree, runs in (("before", before), ("after", after)):
                    values = [run[comparison][side][0][clock_index] for run in runs]
                    ratios = [run[comparison][side][0][clock_index] / run[comparison][baseline][0][clock_index]
                              for run in runs]
                    line.append(f"{tree} {1e3 * statistics.median(values):.3f} ms/step ({side}/{baseline} "
                                f"{statistics.median(ratios):.3f})")
                change = [a[comparison][side][0][clock_index] / b[comparison][side][0][clock_index]
                          for a, b in zip(after, before, strict=True)]
                line.append(f"after/before {statistics.median(change):.3f} (per round: "
                            f"{', '.join(f'{x:.3f}' for x in change)})")
                print(", ".join(line))
    if "paired" in after[0]:
        for clock_index, clock_name in ((0, "wall"), (1, "cpu")):
            print(f"  paired epochs, {clock_name}: " + "; ".join(
                f"{side}/loop before {statistics.median(run['paired'][side][0][clock_index] for run in before):.3f}, "
                f"after {statistics.median(run['paired'][side][0][clock_index] for run in after):.3f}"
                for side in after[0]["paired"]))


def main() -> None:
    """Parse the arguments and run the chosen comparisons (or compare two trees with ``--against``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--epochs", type=int, default=5, help="epochs per measurement (the first is warm-up)")
    parser.add_argument("--width", type=int, default=256, help="hidden width of the MLP")
    parser.add_argument("--only", choices=("single", "ddp", "opcodes"), default=None,
                        help="run one comparison only")
    parser.add_argument("--bar-cost", action="store_true", help="also run the Trainer without the progress bar")
    parser.add_argument("--against", metavar="SOURCE", default=None,
                        help="a folder holding another accelkit package (a checkout's core/src): compare it (before) "
                             "with this tree (after), round by round in child processes")
    parser.add_argument("--json", metavar="PATH", default=None, help="also write the results to PATH as JSON")
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the first is warm-up)")
    if args.against is not None and not os.path.isfile(os.path.join(args.against, "accelkit", "__init__.py")):
        parser.error(f"--against {args.against!r} holds no accelkit package (accelkit/__init__.py); give a "
                     "checkout's core/src folder")
    warnings.simplefilter("ignore")  # plugin-discovery warnings of unrelated, uninstalled plugins
    if args.against is not None:
        against(args)
        return
    found = run_comparisons(args)
    if args.json is not None:
        Path(args.json).write_text(json.dumps(found))


if __name__ == "__main__":
    main()
