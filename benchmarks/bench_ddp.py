"""What a user's data-parallel run costs: ``Trainer(strategy="ddp_spawn", devices=2)`` against a hand-written
two-process DDP loop, on the CPU (gloo), on the workload of issue 24.

The workload: an MLP 32-64-4, batch 64, AdamW, ``self.log("loss", loss)`` every step on the Trainer side;
progress bar, logger, checkpointing, model summary and sanity check off. The hand loop is what a user writes:
``torch.multiprocessing`` spawn, ``DistributedSampler(shuffle=True)`` with ``set_epoch`` every epoch, a
``DataLoader`` of batch 64, ``DistributedDataParallel``, AdamW, ``zero_grad``/``backward``/``step``. Both sides
give each process the same intra-op thread count (``ddp_spawn``'s share of the cores, unless
``OMP_NUM_THREADS`` is set).

Both sides use one clock, in the workers (rank 0's is reported): an epoch lasts from its start to the next
epoch's start (the last one: to the end of training), so the sampler's ``set_epoch``, the loader's start and
whatever the Trainer does at an epoch's end are inside it. A measurement is one run of ``--epochs`` epochs: the
median per-step time of the epochs after the first (warm-up). Three comparisons:

``side by side``: the two sides in separate runs, interleaved, their order rotated every round; per round the
ratio Trainer / hand loop; the median ratio and the spread (lowest-highest) over the rounds, by the wall clock and
by rank 0's CPU time (on a loaded machine a rank's wall time is mostly waiting for the other to be scheduled).

``paired``: inside the Trainer's workers a callback runs one epoch of the hand-written loop (its own model,
sampler, loader and optimizer, the same process group) beside every Trainer epoch — right before it in even
epochs, right after it in odd ones, so neither side always follows the other — and both epochs of a pair meet the
same machine load. Every span starts and ends at a barrier of the process group, so each is charged the wait for
its own slowest rank (a rank late out of one side's epoch makes that side wait, not the side that runs next); per
round the median over epochs of Trainer epoch / loop epoch, by the wall clock and by rank 0's CPU time, also per
order; also by the CPU time of rank 0's training thread alone, the steadiest of the three (gloo's threads' CPU
time varies with how the ranks' messages meet). Much less disturbed by a shared machine than ``side by side``.

``counts``: what load does not change, per steady step on rank 0: host operations (``torch``
operators seen by ``torch.profiler``), collectives (gloo calls) and Python instructions (``sys.settrace``
opcode events), for each side, with the operators and collectives the Trainer adds. A counted epoch is a whole one
on both sides (the sampler's epoch, the loader's start, the steps, and on the Trainer's its epoch end), so per-epoch
work shows, spread over its steps: by default the timed epochs' steps (``--samples``' 64), so that per-epoch work
weighs in the count as much as in the time (``--count-steps N`` counts shorter epochs, faster). Then what differs
beyond the counts: both sides' ``DistributedDataParallel`` settings, and rank 0's threads with how often the
Trainer's own wake.

    .venv/bin/python benchmarks/bench_ddp.py [--rounds 7] [--epochs 6] [--samples 8192]
                                             [--only side-by-side|paired|counts] [--count-steps N]

Where the Trainer's extra time goes (issue 24, measured on the 2-core machine at load 2-4 with per-step and
per-thread probes in the paired design; rank 0 and rank 1 alike):

- the Python it runs: rank 0's main thread costs 5-7 % more CPU per step in the Trainer's epochs (the steps inside
  an epoch, not only its ends), and ``--only counts`` finds ~6.8 % more Python instructions per step (~650 over
  the hand loop's ~9530) and 4 more operators (of ~620: ``self.log``'s detach, the logged value's clone).
  Removing ``self.log`` from the module (~150 instructions, 3 operators) took rank 0's training-thread CPU ratio
  from 1.064-1.081 (median 1.068) to 1.041-1.052 (1.050), 4 interleaved runs each: on this workload the step's
  CPU time follows its Python instructions, and the rest of the gap is the loop's per-step bookkeeping (the fit
  loop's body, the closure and optimizer-step frames, the batch's device check, the step's count and the
  watchdog's note), a few instructions each. Cut since (D2): a batch that steps with nothing around the step
  runs in one frame (``Optimization._plain_batch``, now ``plain_batch_runner``'s closure), a name logged again
  with the same options keeps its first decisions, a batch of plain tensors has its devices read in C:
  10182 -> 10036 instructions per step
  (x1.068 -> x1.053; single process, ``bench_cuda.py --device cpu --workloads mlp``: 9423 -> 9271 against the hand
  loop's 8835). Cut since (P): an epoch with nothing around the step runs its batches in ``FitLoop._plain_steps``
  (no batch hooks or callbacks, automatic optimization stepping every batch, no step-interval scheduler,
  validation at the epoch's end only, decided per epoch), a repeated ``self.log`` is found by one lookup of its
  name and options, the epoch's start looks at the loader's samplers once: 10036 -> 9992 instructions per step
  (x1.053 -> x1.048). ``bench_cuda.py``'s step span is marked by a callback's ``on_train_batch_start``/``_end``,
  which made its epochs general: 9271 -> 9249 there (the ``self.log`` cut only; it is now timed from the module's
  ``training_step``, so its accelkit side runs the plain loop). Cut since (P2): the plain epoch's device transfer
  follows a plan made from its first batch (``apply_func.device_plan``: 53 -> 29), the plain batch's phases are
  bound once per epoch (``Optimization.plain_batch_runner``: 59 -> 51). P2's one-frame repeated ``self.log`` (79 ->
  48) was not merged: it kept one value per name, where Lightning keeps one per hook (main's ``MetricStore`` now
  does, which costs a check of the logging hook per repeat). Measured on main after both: 9994 instructions per step
  against the hand loop's 9533 (x1.048). Cut since (P3): a repeated ``self.log`` is one lookup in ``Module.log``
  keyed by the name, the logging function's code, the value's kind and the options, and a step value logged by
  its hook itself is stored there (92 -> 54 in one frame; a helper's repeat is checked against the hook running it,
  so a name keeps one value per hook; a Python float has the same path: 224 -> 102), a training epoch's first log
  takes the decisions of the epoch before (613 -> 266), the plain epoch reads its loader one batch ahead in its own
  frame (``DataConnector.read_ahead``: no generator) and writes the watchdog's note without a call
  (``watchdog.step_note``), an entry's shown names are worked out once: 9991 -> 9920 instructions per step (x1.048 ->
  x1.041; ``bench_cuda.py --device cpu --workloads mlp``: 9268 -> 9219 against the hand loop's 8921, x1.039 ->
  x1.033). Those counts were of 20-step epochs, which charge each step 3.2 times the per-epoch work of the timed
  64-step epochs; the count now takes the timed epochs' length: 9807 against the hand loop's 9515 (x1.031; the
  target x1.03 is 9800). Cut since (P4): after a plain batch, whether anything is due (the epoch's last batch, a
  stop, a log, a time or step limit) is one test, what is due then in ``FitLoop._plain_batch_end`` (105 -> 95,
  +3 there per step), a list or tuple already on the device follows its plan with one class read and one C test of its
  elements (``apply_func.device_plan``'s ``sequence_stays``: 27 -> 22), the router merges keyword arguments only when
  a call has some (13 -> 12): 9807 -> 9794 (x1.029). Issue 40's one epoch loop and one eager step (no plain loop,
  the note through ``watchdog.mark_step``) took it to 9847 (x1.035: the batch generator, the note's call, the empty
  hook lists' tests, the step's window tests). Cut since: the loop reads its batches in its own frame
  (``DataConnector.epoch_batches``: ``itertools`` pieces, the last batch told in C; no generator frame), one test
  per epoch-constant skips the empty batch hooks and what only an epoch's last batch does, the epoch's plan (hooks,
  batch runner) is kept across epochs, ``mark_step`` writes a slice built once: 9847 -> 9817 (x1.032; the code
  before issue 40 counts 9801 on the same machine: the rest of the difference is ``mark_step``'s frame, 12, and the
  one step's window tests, which a second copy of the step without them would save, kept out for one step).
  What is left per step (DDP, ``--only counts``, 64-step epochs): the epoch loop's body (~92: the
  batch's device plan's call, the note's call, the batch's counters, the one test of what is due, the stop
  control's report), ``self.log`` (~54: a key of 14 parts, the value's detach and clone), the step (~56), the
  device plan (~22), the note (~12), the wrapper's router (~12, ``strategies/base.py``), the step's count (~9,
  ``Progress.advance_step``: the counters' one writer), and per epoch (measured at 20 steps an epoch: ~135 per
  step, a third of that over a 64-step epoch: the metrics' publishing twice, ~28; the exact-resume record of the
  epoch's random states, samplers and generators, ~18; the sampler's epoch, ~8; the epoch's own start and end).
  Not done (a few instructions each): the step without its output (``{"loss": loss}``, unused without a batch-end
  hook: ~5), the step's count in the batch's frame (~7, against the counters' one writer), the router's call
  (~12), the note's clock read by the watchdog's thread instead (~3, but its "since" a second late), the
  precision's forward context inside the step (the ``_inside`` frame, ~8 with ``bf16-mixed``),
  publishing the three dicts in one pass over the entries (~15 per step at 20 steps an epoch);
- the epoch's ends: the Trainer's epoch start and end (sampler epoch, random states for an exact resume, the
  loader's start with its one batch read ahead, the end-of-epoch publishing) cost ~1.3 ms of CPU more than the
  hand loop's, ~0.8 % of a 64-step epoch;
- not threads: per-thread CPU (``/proc/self/task/*/schedstat``): gloo's threads take ~10 % of the main thread's,
  varying by tens of percent from run to run and not higher in the Trainer's epochs (if anything in the hand
  loop's: the whole process's CPU ratio tends below the training thread's); the watchdog's thread well under 1 ms
  a second; not garbage collection (a few gen-0/gen-1 collections per ten epochs on either side); not extra
  collectives or system calls (``strace -f``: the same gloo traffic per step);
- the order of a pair: the per-order ratios move from run to run by more than the gap (last session 1.020 with
  the hand loop before and 1.078 after, by CPU time; in this session's runs either order came out higher), and a
  design with one order throughout gave ~1.06-1.07 by the training thread's CPU time for either order: no order
  effect beyond the noise of a shared machine. Rank skew at the epoch boundary, which the first all-reduce of
  whichever epoch ran next used to absorb, is now charged to the side that caused it (the barriers above).

``benchmarks/bench_trainer.py --only ddp`` measures a different thing: a wide MLP (width 256, so the arithmetic
hides the framework), the fastest epoch, the Trainer's epoch from its ``on_train_epoch_start`` hook (the end of
an epoch outside it) and the bar on: use this script for what a user's DDP run costs. On a small shared machine
set ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import accelkit

BATCH_SIZE = 64
WORLD = 2


def make_data(samples: int) -> TensorDataset:
    """A fixed random 32-feature, 4-class problem."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, 32, generator=generator)
    y = torch.randint(0, 4, (samples,), generator=generator)
    return TensorDataset(x, y)


def make_net() -> nn.Module:
    """The tiny MLP 32-64-4 every side trains."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))


def make_optimizer(params: Any) -> torch.optim.Optimizer:
    """AdamW, as in the issue's workload."""
    return torch.optim.AdamW(params, lr=1e-3)


class Net(nn.Module):
    """The hand loop's model: the MLP in a module of the same shape as :class:`BenchModule` (``self.net``), so
    that the user's own code is the same on both sides."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BenchModule(accelkit.Module):
    """The Trainer's side: the MLP, ``self.log("loss", loss)`` every step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_net()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return make_optimizer(self.parameters())


def set_threads() -> None:
    """The intra-op threads ``ddp_spawn`` gives each worker (its share of the cores), unless OMP_NUM_THREADS says."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORLD))


class HandLoop:
    """The hand-written DDP loop of one rank, in a process group that exists already."""

    def __init__(self, dataset: TensorDataset) -> None:
        self.sampler = DistributedSampler(dataset, shuffle=True, seed=0)
        self.loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=self.sampler)
        self.model = nn.parallel.DistributedDataParallel(Net())
        self.optimizer = make_optimizer(self.model.parameters())
        self.model.train()
        self.epoch = 0

    def run_epoch(self, steps: int | None = None) -> None:
        """One epoch (or its first ``steps`` batches), as a user writes it."""
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        for x, y in (self.loader if steps is None else itertools.islice(self.loader, steps)):
            loss = F.cross_entropy(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()


def per_step(starts: list[tuple[float, float]], steps: int) -> dict[str, float]:
    """Median seconds per step over the epochs after the first, by the wall clock and by this process's CPU time,
    from the epochs' start times (and the end)."""
    return {key: statistics.median(b[i] - a[i] for a, b in list(zip(starts, starts[1:], strict=False))[1:]) / steps
            for i, key in enumerate(("per_step", "per_step_cpu"))}


# ------------------------------------------------------------------------------------------ hand loop
def _hand_worker(rank: int, port: int, samples: int, epochs: int, path: str) -> None:
    set_threads()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        loop = HandLoop(make_data(samples))
        starts = []
        for _ in range(epochs):
            starts.append((time.perf_counter(), time.process_time()))
            loop.run_epoch()
        starts.append((time.perf_counter(), time.process_time()))
        if rank == 0:
            Path(path).write_text(json.dumps(per_step(starts, len(loop.loader))))
    finally:
        dist.destroy_process_group()


def hand_run(samples: int, epochs: int) -> dict[str, float]:
    """Rank 0's median seconds per step of the hand-written DDP loop (wall and CPU)."""
    import torch.multiprocessing as mp

    from accelkit.strategies import find_free_port

    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        path = os.path.join(tmp, "result.json")
        mp.start_processes(_hand_worker, args=(find_free_port(), samples, epochs, path), nprocs=WORLD, join=True,
                           start_method="spawn")
        return json.loads(Path(path).read_text())


# ------------------------------------------------------------------------------------------ Trainer
def clocks() -> tuple[float, float, float]:
    """The wall clock, this process's CPU time and this thread's (the training thread's: gloo's own threads left
    out, whose CPU time varies with how the ranks' messages meet)."""
    return time.perf_counter(), time.process_time(), time.thread_time()


def synced_now() -> tuple[float, float, float]:
    """:func:`clocks`, read once every process got here (a barrier of the process group): a span that ends with
    one is charged the wait for its slowest rank."""
    dist.barrier()
    return clocks()


class EpochStarts(accelkit.Callback):
    """Rank 0 writes the time at every epoch's start and at the end of training to ``path``; with ``paired``,
    one epoch of :class:`HandLoop` runs beside each Trainer epoch (timed alone, left out of the Trainer's): before
    it in even epochs (from ``on_train_epoch_start``), after it in odd ones (from ``on_train_epoch_end``), so that
    neither side is always the one that follows the other. The pairs are also timed by the process's CPU time
    (which a loaded machine disturbs less than the wall clock).

    With ``paired`` every time is read after a barrier (:func:`synced_now`), so a span ends when its slowest rank
    is done with it: a rank that comes late out of one side's epoch (a slower epoch end and start, a late step) makes
    that side wait, not the side that runs next, which otherwise paid for the skew in its first all-reduce. An even
    pair's spans hold one barrier each; an odd pair's two each (the hand loop's span cuts the Trainer's in two)."""

    def __init__(self, path: str, samples: int, paired: bool = False) -> None:
        self.path, self.samples, self.paired = path, samples, paired
        self.starts: list[tuple[float, ...]] = []
        self.loop_times: list[tuple[float, ...]] = []
        self.ends: list[tuple[float, ...]] = []
        self.loop: HandLoop | None = None

    def _now(self) -> tuple[float, float, float]:
        return synced_now() if self.paired else clocks()

    def _loop_epoch(self, start: tuple[float, ...], barriers: int) -> tuple[float, ...]:
        """One hand-loop epoch, its span from ``start`` (a :func:`synced_now`) to the barrier after it, holding
        ``barriers`` barriers in all (the loop's own first); returns the time it ended."""
        if self.loop is None:
            self.loop = HandLoop(make_data(self.samples))
        for _ in range(barriers - 1):
            dist.barrier()
        self.loop.run_epoch()
        end = synced_now()
        self.loop_times.append(tuple(b - a for a, b in zip(start, end, strict=True)))
        return end

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        now = self._now()
        if self.starts:
            self.ends.append(now)
        if self.paired and trainer.current_epoch % 2 == 0:
            now = self._loop_epoch(now, barriers=1)
        self.starts.append(now)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        if self.paired and trainer.current_epoch % 2 == 1:
            cut = synced_now()  # the Trainer's span stops here, and goes on once the loop's ended
            end = self._loop_epoch(cut, barriers=2)
            start = self.starts[-1]
            self.starts[-1] = tuple(s + b - a for s, a, b in zip(start, cut, end, strict=True))

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.ends.append(self._now())
        if trainer.global_rank == 0:
            steps = trainer.num_training_batches
            spans = [[(b - a) / steps for a, b in zip(s, e, strict=True)]
                     for s, e in zip(self.starts, self.ends, strict=True)][1:]
            result = {"per_step": statistics.median(t[0] for t in spans),
                      "per_step_cpu": statistics.median(t[1] for t in spans)}
            if self.paired:
                assert self.loop is not None
                loops = [[v / len(self.loop.loader) for v in t] for t in self.loop_times][1:]
                for index, clock in enumerate(("paired", "paired_cpu", "paired_thread")):
                    ratios = [a[index] / b[index] for a, b in zip(spans, loops, strict=True)]
                    result[clock] = statistics.median(ratios)
                    # spans[0] is epoch 1 (odd: the hand loop after it); odd positions are even epochs
                    result[clock + "_loop_after"] = statistics.median(ratios[0::2])
                    if ratios[1::2]:
                        result[clock + "_loop_before"] = statistics.median(ratios[1::2])
            Path(self.path).write_text(json.dumps(result))


def bench_trainer(epochs: int, callbacks: list[Any]) -> accelkit.Trainer:
    """The Trainer of the workload: ddp_spawn on two CPU processes, nothing per epoch the hand loop lacks."""
    return accelkit.Trainer(accelerator="cpu", strategy="ddp_spawn", devices=WORLD, max_epochs=epochs,
                            logger=False, enable_progress_bar=False, enable_checkpointing=False,
                            enable_model_summary=False, num_sanity_val_steps=0, callbacks=callbacks)


def trainer_run(samples: int, epochs: int, paired: bool = False) -> dict[str, float]:
    """Rank 0's median seconds per step of the Trainer (and, ``paired``, the median paired ratio)."""
    loader = DataLoader(make_data(samples), batch_size=BATCH_SIZE, shuffle=True)
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        path = os.path.join(tmp, "result.json")
        bench_trainer(epochs, [EpochStarts(path, samples, paired)]).fit(BenchModule(), train_dataloaders=loader)
        return json.loads(Path(path).read_text())


# ------------------------------------------------------------------------------------------ counts
class StepCounter:
    """Host operators, collectives and Python instructions of ``steps`` steps on this rank."""

    def __init__(self) -> None:
        self.opcodes = 0
        self.ops: collections.Counter[str] = collections.Counter()
        #: opcodes per function (``file:function``)
        self.functions: collections.Counter[str] = collections.Counter()
        self.running: list[Any] = []

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.opcodes += 1
            code = frame.f_code
            self.functions[f"{code.co_filename.rsplit('site-packages/', 1)[-1].rsplit('src/', 1)[-1]}:"
                           f"{code.co_name}"] += 1
        return self.trace

    def trace_running(self, frame: Any) -> None:
        """Also count the frames running now (``frame`` and its callers: the fit loop's own body), which
        ``sys.settrace`` alone leaves out: it traces the frames started after it."""
        while frame is not None:
            frame.f_trace, frame.f_trace_opcodes = self.trace, True
            self.running.append(frame)
            frame = frame.f_back

    def untrace_running(self) -> None:
        """Stop counting the frames :meth:`trace_running` added."""
        for frame in self.running:
            frame.f_trace = None
        self.running.clear()

    def measure(self, run: Callable[[], None]) -> None:
        """Run ``run`` twice: under ``torch.profiler`` (operators), then under ``sys.settrace`` (opcodes)."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run()
        for event in prof.events():
            self.ops[event.name] += 1
        sys._getframe().f_trace_opcodes = True  # Python 3.12: opcode events only if a frame asked before settrace
        sys.settrace(self.trace)
        try:
            run()
        finally:
            sys.settrace(None)


#: the ``DistributedDataParallel`` settings that change what a step does (its buckets, its syncs)
DDP_SETTINGS = ("bucket_bytes_cap", "gradient_as_bucket_view", "broadcast_buffers", "find_unused_parameters",
                "static_graph", "require_backward_grad_sync")


def process_figures(model: Any) -> dict[str, Any]:
    """What else a rank's process holds while it trains: the DDP wrapper's settings and the process's threads (the
    Python ones by name; all of them, torch's and gloo's native threads included, from ``/proc``)."""
    import threading

    from accelkit.strategies.launchers.watchdog import STORE_CALL_THREAD

    try:
        native = len(os.listdir("/proc/self/task"))
    except OSError:
        native = -1
    return {"ddp": {name: getattr(model, name, None) for name in DDP_SETTINGS},
            # a watchdog store call in flight runs in a thread of its own for at most STORE_TIMEOUT_S: part of the
            # watchdog's once-a-second write, not a thread of the run (whether one is alive is the sample's timing)
            "threads": sorted(t.name for t in threading.enumerate() if t.name != STORE_CALL_THREAD),
            "native threads": native}


def counts_result(counter: StepCounter, steps: int, model: Any) -> dict[str, Any]:
    """Per-step figures of ``counter`` (``steps`` steps measured), with :func:`process_figures` of ``model``."""
    ops = {name: n / steps for name, n in counter.ops.items()}
    return {"ops": ops, "opcodes": counter.opcodes / steps,
            "functions": {name: n / steps for name, n in counter.functions.items()}, **process_figures(model)}


def _hand_counts_worker(rank: int, port: int, steps: int, path: str) -> None:
    set_threads()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        loop = HandLoop(make_data(WORLD * BATCH_SIZE * (steps + 1)))
        loop.run_epoch()  # warm-up
        counter = StepCounter()
        counter.measure(lambda: loop.run_epoch(steps))
        if rank == 0:
            Path(path).write_text(json.dumps(counts_result(counter, steps, loop.model)))
    finally:
        dist.destroy_process_group()


class CountingCallback(accelkit.Callback):
    """Counts one whole epoch under the profiler (from the third epoch's ``on_train_epoch_start`` to the fourth's:
    its steps, its end and the next epoch's start, the sampler's epoch and the loader's start included, as the hand
    loop's counted epoch includes its own), then the next whole epoch's opcodes; the first two are warm-up."""

    def __init__(self, path: str, steps: int) -> None:
        self.path, self.steps = path, steps
        self.counter = StepCounter()
        self.profiler: Any = None

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        if trainer.current_epoch == 2:
            from torch.profiler import ProfilerActivity, profile

            self.profiler = profile(activities=[ProfilerActivity.CPU])
            self.profiler.__enter__()
        elif trainer.current_epoch == 3:
            self.profiler.__exit__(None, None, None)
            for event in self.profiler.events():
                self.counter.ops[event.name] += 1
            self.counter.trace_running(sys._getframe(1))
            sys.settrace(self.counter.trace)
        elif trainer.current_epoch == 4:
            sys.settrace(None)
            self.counter.untrace_running()
            if trainer.global_rank == 0:
                Path(self.path).write_text(json.dumps(counts_result(self.counter, self.steps, trainer.model)))


def trainer_counts(steps: int) -> dict[str, Any]:
    """Per-step counts of the Trainer's rank 0 (epochs of ``steps`` steps)."""
    loader = DataLoader(make_data(WORLD * BATCH_SIZE * steps), batch_size=BATCH_SIZE, shuffle=True)
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        path = os.path.join(tmp, "result.json")
        bench_trainer(5, [CountingCallback(path, steps)]).fit(BenchModule(), train_dataloaders=loader)
        return json.loads(Path(path).read_text())


def hand_counts(steps: int) -> dict[str, Any]:
    """Per-step counts of the hand loop's rank 0."""
    import torch.multiprocessing as mp

    from accelkit.strategies import find_free_port

    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as tmp:
        path = os.path.join(tmp, "result.json")
        mp.start_processes(_hand_counts_worker, args=(find_free_port(), steps, path), nprocs=WORLD, join=True,
                           start_method="spawn")
        return json.loads(Path(path).read_text())


def is_collective(name: str) -> bool:
    """Whether a profiler event is a collective the process issued: the process group's dispatcher operators
    (``c10d::allreduce_``...), recorded on the thread that issues them. The backend's own events (``gloo:all_reduce``)
    are not counted: its worker thread records one when the work ends, which can be after the profiler stopped
    (a step's last all-reduce was missing now and then under load, so one side read 1.67 per step, the other 2)."""
    return name.startswith("c10d::")


def print_counts(steps: int) -> dict[str, dict[str, Any]]:
    """Measure and print the per-step counts of both sides; returns them."""
    result = {"hand loop": hand_counts(steps), "ddp_spawn": trainer_counts(steps)}
    for name, figures in result.items():
        ops = figures["ops"]
        host = sum(n for op, n in ops.items() if op.startswith("aten::"))
        collectives = sum(n for op, n in ops.items() if is_collective(op))
        figures["aten"], figures["collectives"] = host, collectives
        print(f"  {name:<10}: {host:.2f} aten ops, {collectives:.2f} collectives, "
              f"{figures['opcodes']:.0f} Python instructions per step")
    hand_side, ours_side = result["hand loop"], result["ddp_spawn"]
    print(f"  Trainer / hand loop per step: Python instructions x{ours_side['opcodes'] / hand_side['opcodes']:.3f}, "
          f"aten ops x{ours_side['aten'] / hand_side['aten']:.3f} (what a step costs on the CPU follows the "
          "instructions: see the docstring)")
    hand, ours = result["hand loop"]["ops"], result["ddp_spawn"]["ops"]
    extra = {op: ours.get(op, 0) - hand.get(op, 0) for op in set(hand) | set(ours)}
    shown = sorted((op for op, n in extra.items() if abs(n) >= 0.01 and (op.startswith("aten::") or is_collective(op))),
                   key=lambda op: -abs(extra[op]))
    print("  per step, Trainer minus hand loop: " + (", ".join(f"{op} {extra[op]:+.2f}" for op in shown) or "nothing"))
    hand, ours = result["hand loop"]["functions"], result["ddp_spawn"]["functions"]
    extra = {name: ours.get(name, 0) - hand.get(name, 0) for name in set(hand) | set(ours)}
    print("  Python instructions per step, Trainer minus hand loop, by function (the largest): " + ", ".join(
        f"{name} {extra[name]:+.0f}" for name in sorted(extra, key=lambda n: -abs(extra[n]))[:16]))
    print_differences(result["hand loop"], result["ddp_spawn"])
    return result


def print_differences(hand: dict[str, Any], ours: dict[str, Any]) -> None:
    """What the Trainer's rank does beyond the counts, against the hand loop's: DDP's settings, the threads."""
    from accelkit.strategies.launchers import spawn, watchdog

    differ = {k: (hand["ddp"][k], ours["ddp"][k]) for k in DDP_SETTINGS if hand["ddp"][k] != ours["ddp"][k]}
    print("  DistributedDataParallel settings: " + (
        "the same on both sides (" + ", ".join(f"{k}={hand['ddp'][k]}" for k in DDP_SETTINGS) + ")" if not differ
        else "differ: " + ", ".join(f"{k} hand loop {a}, Trainer {b}" for k, (a, b) in differ.items())))
    extra = sorted(set(ours["threads"]) - set(hand["threads"]))
    print(f"  threads of rank 0: hand loop {hand['native threads']} ({', '.join(hand['threads'])}), Trainer "
          f"{ours['native threads']} ({', '.join(ours['threads'])}); the Trainer's own: {', '.join(extra) or 'none'}"
          f": its watchdog wakes every {watchdog.REPORT_EVERY_S:.0f} s (one store write a second, whatever the "
          f"step rate); the launching process wakes every {spawn.WATCH_EVERY_S:.0f} s to see a stopped worker "
          "or a signal's deadline (the hand loop's blocks): at 1 ms a step, one wake-up of each per 1000 steps")


# ------------------------------------------------------------------------------------------ driver
def interleave(sides: dict[str, Callable[[], float]], rounds: int, unit: str) -> dict[str, list[float]]:
    """Each side once per round, the order rotated every round; prints each round."""
    names = list(sides)
    results: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            results[name].append(sides[name]())
        print(f"  round {r + 1}/{rounds} ({' > '.join(order)}): "
              + ", ".join(f"{n} {results[n][-1] * (1e3 if unit == 'ms/step' else 1):.4f}" for n in names)
              + f" {unit}", flush=True)
    return results


def spread(values: list[float]) -> str:
    """``median (lowest-highest)``."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run the comparisons, print the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per run (the first is warm-up)")
    parser.add_argument("--samples", type=int, default=8192, help="samples per epoch (64 steps per rank: 8192)")
    parser.add_argument("--count-steps", type=int, default=None,
                        help="steps per counted epoch (default: the timed epoch's, --samples // 2 // 64)")
    parser.add_argument("--only", choices=("side-by-side", "paired", "counts"), default=None)
    args = parser.parse_args(argv)
    if args.epochs < 3:
        parser.error(f"--epochs={args.epochs} must be at least 3 (the first is warm-up, then a median)")
    if args.rounds < 1:
        parser.error(f"--rounds={args.rounds} must be at least 1")
    warnings.simplefilter("ignore")  # plugin-discovery warnings of unrelated, uninstalled plugins
    steps = args.samples // WORLD // BATCH_SIZE
    count_steps = steps if args.count_steps is None else args.count_steps
    if count_steps < 1:
        parser.error(f"--count-steps={count_steps} must be at least 1 (or --samples at least {WORLD * BATCH_SIZE})")
    print(f"torch {torch.__version__}, accelkit {accelkit.__version__}, {os.cpu_count()} cores, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, load {os.getloadavg()[0]:.1f}; MLP 32-64-4, batch "
          f"{BATCH_SIZE}, AdamW, {WORLD} processes (gloo), {steps} steps per epoch per rank, median of "
          f"{args.epochs - 1} epochs after a warm-up one, {args.rounds} rounds, order rotated", flush=True)
    if args.only in (None, "counts"):
        print(f"counts per step, rank 0 (epochs of {count_steps} steps"
              f"{', as timed' if count_steps == steps else ''}):", flush=True)
        print_counts(count_steps)
    if args.only in (None, "side-by-side"):
        print("side by side (separate runs):", flush=True)
        runs: dict[str, list[dict[str, float]]] = {"hand loop": [], "ddp_spawn": []}

        def side(name: str, run: Callable[[], dict[str, float]]) -> Callable[[], float]:
            def measured() -> float:
                runs[name].append(run())
                return runs[name][-1]["per_step"]
            return measured

        interleave({"hand loop": side("hand loop", lambda: hand_run(args.samples, args.epochs)),
                    "ddp_spawn": side("ddp_spawn", lambda: trainer_run(args.samples, args.epochs))},
                   args.rounds, "ms/step")
        for key, clock in (("per_step", "wall"), ("per_step_cpu", "rank 0's CPU time")):
            hand, ours = ([r[key] for r in runs[name]] for name in ("hand loop", "ddp_spawn"))
            print(f"  {clock}: hand loop {statistics.median(hand) * 1e3:.4f}, ddp_spawn "
                  f"{statistics.median(ours) * 1e3:.4f} ms/step (medians); ratio ddp_spawn / hand loop "
                  f"{spread([t / h for t, h in zip(ours, hand, strict=True)])}  target <= 1.03", flush=True)
    if args.only in (None, "paired"):
        print("paired epochs (a hand-loop epoch beside each Trainer epoch, in the Trainer's workers, before it in "
              "even epochs and after it in odd ones):", flush=True)
        runs: list[dict[str, float]] = []

        def paired_run() -> float:
            runs.append(trainer_run(args.samples, args.epochs, paired=True))
            return runs[-1]["paired"]

        interleave({"ratio": paired_run}, args.rounds, "ratio")
        print(f"  ratio ddp_spawn / hand loop, wall: {spread([r['paired'] for r in runs])}, rank 0's CPU time: "
              f"{spread([r['paired_cpu'] for r in runs])}, its training thread's CPU: "
              f"{spread([r['paired_thread'] for r in runs])}  target <= 1.03", flush=True)
        for order in ("loop_before", "loop_after"):
            pairs = [r for r in runs if "paired_" + order in r]
            if pairs:
                print(f"    pairs with the hand loop {order.split('_')[1]} the Trainer epoch: wall "
                      f"{spread([r['paired_' + order] for r in pairs])}, CPU "
                      f"{spread([r['paired_cpu_' + order] for r in pairs])}, training thread "
                      f"{spread([r['paired_thread_' + order] for r in pairs])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
