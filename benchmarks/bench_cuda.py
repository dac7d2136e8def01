"""accelkit on one GPU against a hand-written PyTorch loop, side by side with Lightning and Accelerate where they are
installed: steady time per step, peak memory, and what each step launches.

Two workloads (issue 24): ``mlp``, a tiny MLP 32-64-4 at batch 64 (the framework's own work dominates), and
``transformer``, an 8-layer transformer encoder (d512, 8 heads, sequence 512, batch 32; compute dominates). Every
side trains the same network from the same seed on the same synthetic data (made here, nothing downloaded) with
AdamW, ``bf16-mixed`` (autocast) and a pinned ``DataLoader`` (batches copied with ``non_blocking=True``); the
framework sides call ``self.log("loss", loss)`` every step and run with the progress bar, logger, checkpointing,
model summary and sanity check off.

A run trains ``--warmup + --steps`` steps; the clock runs from the start of step ``--warmup`` (after its batch
was fetched) to the end of the last step, with the device synchronized at both ends, so start-up, kernel
selection and the first steps stay outside. The sides run once per round, interleaved, their order rotated every
round; per round each side's time is divided by the hand loop's of the same round. Printed: the median time per
step, the median ratio and its spread (lowest-highest over the rounds), and the peak device memory; beside the wall
time, the CPU time of the thread running the steps ("host CPU"), and its ratio: a small GPU step is host-bound, and
the thread's CPU time leaves out the time other processes took the core (on a shared machine the wall time of the
hand loop itself moved by 40 % between rounds: NVIDIA H100, 9 rounds of 300 steps).

Then a count per steady step under ``torch.profiler`` (``--profile-steps`` steps) for the hand loop and accelkit:
kernel launches, memory copies and sets, synchronizations and host operators (``aten::``), and the operators
accelkit adds. Counts do not depend on the machine's load.

Last, the Python that a step runs on the host, which a small GPU step pays in full (the CPU queues kernels faster
than the GPU runs them only while its Python keeps up): the instructions and calls per steady step of the hand
loop and of accelkit (``sys.settrace`` over ``--count-steps`` steps, default 50, one ``log_every_n_steps``), and
the functions where accelkit's instructions differ most from the hand loop's (its extra, function by function).
Each workload is counted in a fresh process that compiles nothing; the counter turns opcode events on before
``sys.settrace`` (on Python 3.12 a first traced run otherwise gets none: the count read 0 there); a side of which
no instruction was seen stops the benchmark with an error rather than print 0. The same process then runs each
side once more under ``cProfile``
over those steps and prints the host time per step of each side and the functions where accelkit's differs most,
C functions (CUDA runtime calls among them) included: what the instruction count cannot see.

    python benchmarks/bench_cuda.py [--workloads mlp transformer] [--rounds 7] [--steps 300] [--warmup 50]
                                    [--profile-steps 50] [--count-steps 50]
    python benchmarks/bench_cuda.py --device cpu     # tiny sizes, a few steps: proves the script runs

With ``--captured``, two more sides run in the same rounds: ``accelkit captured``, the Trainer with
``compile_step={"mode": "reduce-overhead"}`` (torch.compile's default mode on the CPU), and ``hand compiled``, the
hand loop with its loss and its optimizer step compiled with the same options (what one would write by hand, the
floor a captured step can hope for); each compiles afresh (``torch._dynamo.reset()``) inside its warm-up steps.
Their profiled counts add the CUDA graphs replayed per step (``cudaGraphLaunch``), and the difference between the
two compiled sides is printed as for the eager ones. ``benchmarks/bench_captured.py`` measures the captured step
alone, with what each compiled side compiled.

Without an NVIDIA GPU (and without ``--device cpu``) it says so in one sentence and exits with status 2.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import importlib.util
import logging
import os
import pstats
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trainer import OpcodeCounter, extra_functions, short_path  # noqa: E402

import accelkit  # noqa: E402

LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


@dataclass
class Workload:
    """One network and its data: ``kind`` is ``mlp`` or ``transformer``."""

    kind: str
    batch: int
    width: int  # MLP hidden width, or the transformer's model dimension
    layers: int = 0
    seq: int = 0
    vocab: int = 1024
    classes: int = 4
    features: int = 32

    def describe(self) -> str:
        """A few words naming the sizes."""
        if self.kind == "mlp":
            return f"MLP {self.features}-{self.width}-{self.classes}, batch {self.batch}"
        return f"transformer {self.layers} layers d{self.width}, seq {self.seq}, batch {self.batch}"

    def net(self) -> nn.Module:
        """The network, its weights drawn from seed 0."""
        torch.manual_seed(0)
        if self.kind == "mlp":
            return nn.Sequential(nn.Linear(self.features, self.width), nn.ReLU(), nn.Linear(self.width, self.classes))
        return TokenClassifier(self)

    def data(self, steps: int) -> TensorDataset:
        """``steps`` batches of a fixed random problem (one epoch)."""
        generator = torch.Generator().manual_seed(0)
        n = steps * self.batch
        if self.kind == "mlp":
            x = torch.randn(n, self.features, generator=generator)
        else:
            x = torch.randint(0, self.vocab, (n, self.seq), generator=generator)
        return TensorDataset(x, torch.randint(0, self.classes, (n,), generator=generator))


class TokenClassifier(nn.Module):
    """Embedding, a transformer encoder, mean over the sequence, a linear head."""

    def __init__(self, w: Workload) -> None:
        super().__init__()
        self.embed = nn.Embedding(w.vocab, w.width)
        layer = nn.TransformerEncoderLayer(w.width, nhead=max(1, w.width // 64), dim_feedforward=4 * w.width,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, w.layers, enable_nested_tensor=False)
        self.head = nn.Linear(w.width, w.classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(dim=1))


def make_loader(data: TensorDataset, batch: int) -> DataLoader:
    """The loader every side uses: shuffled with seed 0, pinned memory."""
    return DataLoader(data, batch_size=batch, shuffle=True, drop_last=True, pin_memory=True,
                      generator=torch.Generator().manual_seed(0))


def make_optimizer(params: Any) -> torch.optim.Optimizer:
    """AdamW."""
    return torch.optim.AdamW(params, lr=1e-3)


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Span:
    """The timed span of a run: from the start of step ``first`` to the start of step ``last + 1``, so that every
    side is charged whole cycles (its step and what it does between two steps: fetching the next batch, moving it,
    its bookkeeping); optionally profiled, or its Python instructions counted (``counter``, whose trace function
    the caller installs). Each side calls :meth:`step_start` at the top of every step and runs one step more than
    it is timed for."""

    def __init__(self, device: torch.device, first: int, last: int, profile: bool = False,
                 counter: OpcodeCounter | None = None, host_profile: cProfile.Profile | None = None) -> None:
        self.device, self.first, self.last, self.profile, self.counter = device, first, last, profile, counter
        self.host_profile = host_profile
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # the CPU time of the thread running the steps (the host's own work)
        self.events: collections.Counter[str] = collections.Counter()
        self._start = self._cpu_start = 0.0
        self._profiler: Any = None

    def step_start(self, index: int) -> None:
        """Called at the start of every step (its batch fetched): opens the span at ``first``, closes it at
        ``last + 1``."""
        if index == self.last + 1:
            self._close()
        elif index == self.first:
            sync(self.device)
            if self.profile:
                from torch.profiler import ProfilerActivity, profile

                activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
                self._profiler = profile(activities=activities)
                self._profiler.__enter__()
            if self.counter is not None:
                self.counter.counting = True
            if self.host_profile is not None:
                self.host_profile.enable()
            self._start, self._cpu_start = time.perf_counter(), time.thread_time()

    def _close(self) -> None:
        if self.counter is not None:
            self.counter.counting = False
        if self.host_profile is not None:
            self.host_profile.disable()
        cpu = time.thread_time() - self._cpu_start  # before the final wait, which may spin
        sync(self.device)
        self.seconds, self.cpu_seconds = time.perf_counter() - self._start, cpu
        if self._profiler is not None:
            self._profiler.__exit__(None, None, None)
            self.events.update(event.name for event in self._profiler.events())


# ------------------------------------------------------------------------------------------ sides
def device_batches(w: Workload, device: torch.device, steps: int) -> Any:
    """``(index, x, y)`` of the hand-written sides, on the device. Each batch is read one ahead, as the Trainers and
    Accelerate do (they look one batch ahead to know the last one), so that the same batches are fetched inside the
    timed span."""
    batches = iter(make_loader(w.data(steps), w.batch))
    ahead = next(batches, None)
    i = -1
    while ahead is not None:
        i, (x, y) = i + 1, ahead
        ahead = next(batches, None)
        yield i, x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def hand_loop(w: Workload, device: torch.device, span: Span, steps: int) -> None:
    """The hand-written loop."""
    net = w.net().to(device)
    optimizer = make_optimizer(net.parameters())
    net.train()
    for i, x, y in device_batches(w, device, steps):
        span.step_start(i)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


#: torch.compile's options for the compiled sides (set by main: CUDA graphs on a GPU, the default mode on the CPU)
COMPILE: dict[str, Any] = {}


def hand_compiled(w: Workload, device: torch.device, span: Span, steps: int) -> None:
    """The hand loop with its loss and its optimizer step compiled with :data:`COMPILE` (``--captured``)."""
    torch._dynamo.reset()
    net = w.net().to(device)
    optimizer = make_optimizer(net.parameters())
    net.train()
    loss_of = torch.compile(lambda x, y: F.cross_entropy(net(x), y), **COMPILE)
    step = torch.compile(optimizer.step, **COMPILE)
    graphs = COMPILE.get("mode") == "reduce-overhead"
    for i, x, y in device_batches(w, device, steps):
        span.step_start(i)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_of(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        step()


class AccelkitModule(accelkit.Module):
    """The accelkit side. With a ``span``, its ``training_step`` marks the start of every step, as the hand loop
    does at the top of its loop: no batch hook or callback, which would be work the hand loop has not (and takes
    accelkit's fit loop off its plain path)."""

    def __init__(self, w: Workload, span: Span | None = None) -> None:
        super().__init__()
        self.net = w.net()
        self.span = span

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.span is not None:
            self.span.step_start(batch_idx)
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return make_optimizer(self.parameters())


class SpanCallback:
    """Marks the span from the batch-start hook, for the captured step (whose ``training_step`` is compiled)."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.span.step_start(batch_idx)


QUIET = dict(devices=1, precision="bf16-mixed", logger=False, enable_progress_bar=False, enable_checkpointing=False,
             enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0)


def accelkit_run(w: Workload, device: torch.device, span: Span, steps: int) -> None:
    """The same work through ``accelkit.Trainer``."""
    trainer = accelkit.Trainer(accelerator=device.type, max_epochs=1, **QUIET)
    trainer.fit(AccelkitModule(w, span), train_dataloaders=make_loader(w.data(steps), w.batch))


def accelkit_captured_run(w: Workload, device: torch.device, span: Span, steps: int) -> None:
    """The same work through ``accelkit.Trainer(compile_step=COMPILE)`` (``--captured``)."""
    torch._dynamo.reset()
    callback = type("Timing", (SpanCallback, accelkit.Callback), {})(span)
    trainer = accelkit.Trainer(accelerator=device.type, max_epochs=1, callbacks=[callback],
                               compile_step=dict(COMPILE) or True, **QUIET)
    trainer.fit(AccelkitModule(w), train_dataloaders=make_loader(w.data(steps), w.batch))


def lightning_run(w: Workload, device: torch.device, span: Span, steps: int) -> None:
    """The same work through Lightning's Trainer."""
    import lightning.pytorch as pl

    for name in list(logging.root.manager.loggerDict):  # its "GPU available" lines and tips, every run
        if name.startswith("lightning"):
            logging.getLogger(name).setLevel(logging.WARNING)

    class LightningSide(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = w.net()
            self.span = span

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        training_step = AccelkitModule.training_step
        configure_optimizers = AccelkitModule.configure_optimizers

    trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", max_epochs=1, **QUIET)
    trainer.fit(LightningSide(), train_dataloaders=make_loader(w.data(steps), w.batch))


def accelerate_run(w: Workload, device: torch.device, span: Span, steps: int) -> None:
    """The hand loop through Hugging Face Accelerate."""
    # where torch_xla is installed (the CPU machine), importing Accelerate imports it and Accelerate picks the XLA
    # device even with cpu=True; its own switch keeps it on the device asked for (no effect where torch_xla is absent)
    os.environ.setdefault("USE_TORCH_XLA", "0")
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")
    net = w.net()
    optimizer = make_optimizer(net.parameters())
    net, optimizer, loader = accelerator.prepare(net, optimizer, make_loader(w.data(steps), w.batch))
    net.train()
    for i, (x, y) in enumerate(loader):
        span.step_start(i)
        loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad(set_to_none=True)
        accelerator.backward(loss)
        optimizer.step()


SIDES: dict[str, tuple[Callable[..., None], str | None]] = {
    "hand loop": (hand_loop, None),
    "accelkit": (accelkit_run, None),
    "lightning": (lightning_run, "lightning"),
    "accelerate": (accelerate_run, "accelerate"),
}
#: the sides ``--captured`` adds
CAPTURED_SIDES: dict[str, tuple[Callable[..., None], str | None]] = {
    "accelkit captured": (accelkit_captured_run, None),
    "hand compiled": (hand_compiled, None),
}


ALL_SIDES = {**SIDES, **CAPTURED_SIDES}


def measure(side: Callable[..., None], w: Workload, device: torch.device, warmup: int, steps: int,
            profile: bool = False, counter: OpcodeCounter | None = None,
            host_profile: cProfile.Profile | None = None) -> tuple[float, int, Span]:
    """One run of ``side``: seconds per steady step, peak device memory in bytes (0 on the CPU), the span (its
    ``cpu_seconds``: the stepping thread's CPU time). With a ``counter``, the whole run is traced
    (``sys.settrace``) and the span's instructions counted; with a ``host_profile``, the span runs under it."""
    span = Span(device, warmup, warmup + steps - 1, profile, counter, host_profile)
    if device.type == "cuda":
        torch.cuda.init()  # a fresh process (the counting child) has no allocator to reset before this
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    if counter is not None:
        counter.install()  # before the run, so that the loops' own frames are traced too
    try:
        side(w, device, span, warmup + steps + 1)  # the span closes at the top of the extra step
    finally:
        if counter is not None:
            sys.settrace(None)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return span.seconds / steps, peak, span


# ------------------------------------------------------------------------------------------ report
def spread(values: list[float]) -> str:
    """``median (lowest-highest)``."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def compare(w: Workload, device: torch.device, sides: list[str], args: argparse.Namespace) -> dict[str, list[float]]:
    """Interleaved, rotated rounds of every side; prints each round and the summary; returns the ratios."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    host: dict[str, list[float]] = {name: [] for name in sides}  # the stepping thread's CPU seconds per step
    peaks: dict[str, int] = {}
    for r in range(args.rounds):
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        for name in order:
            seconds, peak, span = measure(ALL_SIDES[name][0], w, device, args.warmup, args.steps)
            times[name].append(seconds)
            host[name].append(span.cpu_seconds / args.steps)
            peaks[name] = max(peaks.get(name, 0), peak)
        print(f"  round {r + 1}/{args.rounds} ({' > '.join(order)}): "
              + ", ".join(f"{n} {times[n][-1] * 1e3:.3f}" for n in sides) + " ms/step (host CPU "
              + ", ".join(f"{host[n][-1] * 1e3:.3f}" for n in sides) + ")", flush=True)
    ratios = {name: [t / h for t, h in zip(times[name], times["hand loop"], strict=True)] for name in sides}
    host_ratios = {name: [t / h for t, h in zip(host[name], host["hand loop"], strict=True)] for name in sides}
    width = max(10, *map(len, sides))
    for name in sides:
        memory = f", peak memory {peaks[name] / 2**20:.1f} MiB" if device.type == "cuda" else ""
        ratio = "" if name == "hand loop" else (f", ratio to the hand loop {spread(ratios[name])}, host CPU ratio "
                                                f"{spread(host_ratios[name])}")
        print(f"  {name:<{width}}: {statistics.median(times[name]) * 1e3:.3f} ms/step (host CPU "
              f"{statistics.median(host[name]) * 1e3:.3f}){ratio}{memory}", flush=True)
    return ratios


_CLONE = ("self.log copies the logged value (Lightning clones it too: a tensor changed in place after self.log "
          "keeps its logged value): aten::clone, made of aten::empty_strided + aten::copy_, a device-to-device "
          "cudaMemcpyAsync on a GPU")
#: why accelkit's step has an operator the hand loop's has not (per step, under torch.profiler)
WHY: dict[str, str] = {
    "aten::detach": "self.log detaches the logged value from the graph (as Lightning)",
    "aten::clone": _CLONE, "aten::empty_strided": _CLONE, "aten::copy_": _CLONE, "cudaMemcpyAsync": _CLONE,
}


def step_counts(events: collections.Counter[str], steps: int) -> dict[str, float]:
    """Per-step kernel launches, copies, sets, synchronizations and host operators of a profiled span."""
    def total(match: Callable[[str], bool]) -> float:
        return sum(n for name, n in events.items() if match(name)) / steps

    return {"kernel launches": total(lambda n: n in LAUNCHES),
            "graph launches": total(lambda n: n == "cudaGraphLaunch"),
            "memcpy": total(lambda n: n.startswith("cudaMemcpy")),
            "memset": total(lambda n: n.startswith("cudaMemset")),
            "syncs": total(lambda n: "Synchronize" in n),
            "host ops": total(lambda n: n.startswith("aten::"))}


def profile_counts(w: Workload, device: torch.device, args: argparse.Namespace) -> None:
    """Print per-step counts of the hand loop and accelkit (and, with ``--captured``, of the two compiled sides),
    and the operators accelkit adds to its hand-written counterpart."""
    pairs = [("hand loop", "accelkit")] + ([("hand compiled", "accelkit captured")] if args.captured else [])
    spans = {name: measure(ALL_SIDES[name][0], w, device, args.warmup, args.profile_steps, profile=True)[2]
             for pair in pairs for name in pair}
    width = max(10, *map(len, spans))
    for name, span in spans.items():
        counts = step_counts(span.events, args.profile_steps)
        print(f"  {name:<{width}}: " + ", ".join(f"{value:.2f} {what}" for what, value in counts.items()), flush=True)
    for hand_name, our_name in pairs:
        hand, ours = spans[hand_name].events, spans[our_name].events
        extra = {op: (ours[op] - hand[op]) / args.profile_steps for op in set(hand) | set(ours)}
        shown = sorted((op for op, n in extra.items() if abs(n) >= 0.01 and (op.startswith(("aten::", "cuda", "cu"))
                                                                             or op in LAUNCHES)),
                       key=lambda op: -abs(extra[op]))
        print(f"  per step, {our_name} minus {hand_name}: "
              + (", ".join(f"{op} {extra[op]:+.2f}" for op in shown[:20]) or "nothing"), flush=True)
        reasons = sorted({WHY[op] for op in shown[:20] if op in WHY and extra[op] > 0})
        for reason in reasons:
            print(f"    why: {reason}", flush=True)
        unexplained = [op for op in shown[:20] if op not in WHY and extra[op] >= 0.5]
        if unexplained:
            print(f"    not explained here (new since this list was written): {', '.join(unexplained)}", flush=True)


def instruction_counts(w: Workload, device: torch.device, args: argparse.Namespace) -> None:
    """Print the Python instructions and calls per steady step of the hand loop and accelkit (the host time a
    small GPU step pays in full), and the functions where accelkit's differ most; counted in a fresh process
    (:func:`count_here`), so that nothing this process ran before (a compiled side) hides frames from the trace."""
    sys.stdout.flush()
    command = [sys.executable, str(Path(__file__).resolve()), "--count-here", "--device", device.type,
               "--workloads", w.kind, "--warmup", str(args.warmup), "--count-steps", str(args.count_steps)]
    done = subprocess.run(command, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_cuda: counting the Python per step of {w.kind} failed in its own process "
                         f"(exit status {done.returncode}; its error is above)")


def count_here(w: Workload, device: torch.device, args: argparse.Namespace) -> None:
    """:func:`instruction_counts` in this process (``--count-here``: a process that has compiled nothing)."""
    functions = {}
    for name in ("hand loop", "accelkit"):
        counter = OpcodeCounter()
        measure(SIDES[name][0], w, device, args.warmup, args.count_steps, counter=counter)
        functions[name] = counter.per_function(args.count_steps)
        instructions, calls = counter.per_step(args.count_steps, name)
        print(f"  {name:<10}: {instructions:.0f} Python instructions, {calls:.0f} calls per step", flush=True)
    print("  per step, accelkit minus hand loop, by function: " + ", ".join(
        f"{where} {n:+.0f}" for where, n in extra_functions(functions["accelkit"], functions["hand loop"])),
        flush=True)
    host = {}
    for name in ("hand loop", "accelkit"):
        profiler = cProfile.Profile()
        measure(SIDES[name][0], w, device, args.warmup, args.count_steps, host_profile=profiler)
        host[name] = host_microseconds(profiler, args.count_steps)
    print(f"  host time per step under cProfile (its own cost inflates Python functions; C functions, CUDA calls "
          f"among them, are timed as they run): hand loop {sum(host['hand loop'].values()):.0f} us, accelkit "
          f"{sum(host['accelkit'].values()):.0f} us; accelkit minus hand loop, by function: " + ", ".join(
              f"{where} {n:+.1f} us" for where, n in extra_functions(host["accelkit"], host["hand loop"])),
          flush=True)


def host_microseconds(profiler: cProfile.Profile, steps: int) -> dict[str, float]:
    """Microseconds per step spent in each function itself (cProfile's ``tottime``), by ``file:function`` (a C
    function by its name)."""
    result: collections.Counter[str] = collections.Counter()
    for (path, _, function), (_, _, own, _, _) in pstats.Stats(profiler).stats.items():  # type: ignore[attr-defined]
        result[f"{short_path(path)}:{function}" if path != "~" else function] += own * 1e6 / steps
    return dict(result)


# ------------------------------------------------------------------------------------------ driver
def workloads(device: torch.device) -> dict[str, Workload]:
    """The issue's sizes on a GPU; tiny ones on the CPU (a smoke run)."""
    if device.type == "cuda":
        return {"mlp": Workload("mlp", batch=64, width=64),
                "transformer": Workload("transformer", batch=32, width=512, layers=8, seq=512)}
    return {"mlp": Workload("mlp", batch=64, width=64),
            "transformer": Workload("transformer", batch=4, width=32, layers=2, seq=16)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; on the CPU the defaults shrink to a smoke run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: tiny sizes and few steps, to check that the script works")
    parser.add_argument("--workloads", nargs="+", choices=("mlp", "transformer"), default=["mlp", "transformer"])
    parser.add_argument("--rounds", type=int, default=None, help="default 7 (2 on the CPU)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per run; default 300 (5 on the CPU)")
    parser.add_argument("--warmup", type=int, default=None, help="steps before the clock; default 50 (2 on the CPU)")
    parser.add_argument("--profile-steps", type=int, default=None, help="profiled steps; default 50 (3 on the CPU)")
    parser.add_argument("--count-steps", type=int, default=None,
                        help="steps whose Python instructions are counted; default 50 (one log_every_n_steps)")
    parser.add_argument("--captured", action="store_true",
                        help="also the captured step (compile_step) and the hand loop compiled by hand")
    parser.add_argument("--count-here", action="store_true", help=argparse.SUPPRESS)  # instruction_counts' child
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    for name, gpu_default, cpu_default in (("rounds", 7, 2), ("steps", 300, 5), ("warmup", 50, 2),
                                           ("profile_steps", 50, 3), ("count_steps", 50, 50)):
        value = getattr(args, name)
        if value is None:
            setattr(args, name, cpu_default if cpu else gpu_default)
        elif value < 1:
            parser.error(f"--{name.replace('_', '-')}={value} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; returns the exit status (2 when the GPU asked for is not there)."""
    args = parse(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_cuda: no NVIDIA GPU is visible (torch.cuda.is_available() is False), so there is nothing to "
              "measure here; run it on a GPU machine, or with --device cpu to check that the script works.",
              file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # plugin-discovery and framework hints unrelated to the timing
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if args.count_here:
        for name in args.workloads:
            count_here(workloads(device)[name], device, args)
        return 0
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (smoke run, tiny sizes)"
    sides = [name for name, (_, needs) in SIDES.items() if needs is None or importlib.util.find_spec(needs)]
    if args.captured:
        sides += list(CAPTURED_SIDES)
        COMPILE.update({"mode": "reduce-overhead"} if device.type == "cuda" else {})
    missing = [name for name in SIDES if name not in sides]
    print(f"device: {where}; torch {torch.__version__}; accelkit {accelkit.__version__}; bf16-mixed, AdamW, pinned "
          f"DataLoader; {args.steps} steps after {args.warmup}, {args.rounds} rounds, order rotated; sides: "
          f"{', '.join(sides)}" + (f" ({', '.join(missing)} not installed)" if missing else "")
          + (f"; compiled sides: torch.compile({COMPILE or ''})" if args.captured else ""), flush=True)
    for name in args.workloads:
        w = workloads(device)[name]
        print(f"{name}: {w.describe()}", flush=True)
        compare(w, device, sides, args)
        print(f"{name}: per step under torch.profiler ({args.profile_steps} steps):", flush=True)
        profile_counts(w, device, args)
        print(f"{name}: Python per step (sys.settrace, {args.count_steps} steps; the same on any machine):",
              flush=True)
        instruction_counts(w, device, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
