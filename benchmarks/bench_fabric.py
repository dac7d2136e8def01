"""What a loop of your own costs under ``accelkit.Fabric``: the same training loop written by hand, with accelkit's
Fabric, with Lightning Fabric and with Hugging Face Accelerate (each side where it is installed), on the CPU, on one
process and on two (DDP over gloo: ``Fabric(strategy="ddp")`` + ``fabric.launch()``, the hand loop and Accelerate
started as two processes with the ranks in their environment, as ``torchrun`` does).

The workload (issue 24's tiny step): an MLP 32-64-4, batch 64, AdamW, ``zero_grad``/``forward``/``backward``/``step``;
the loader shuffles (a ``DistributedSampler`` with ``set_epoch`` on two processes, set up by the framework where it
has one). Every side runs in a fresh interpreter of its own with one intra-op thread per process. A measurement is
one run: rank 0 times each epoch (its steps, the sampler's epoch and the loader's start inside) and reports the
median per-step wall time and CPU time (its threads included) of the epochs after the first (warm-up), and its peak
resident memory. On a shared machine the CPU time is the steadier of the two.

Sides run interleaved: each round runs every side once, the order rotated from round to round; per round the ratio
of each side to the hand loop; printed: the median ratio and its spread (lowest-highest) over the rounds, and the
median peak memory. A benchmark, not a test: ``tests/test_benchmarks.py`` only runs it in a tiny configuration.

``--only counts``: what load does not change (clocks on a loaded machine are noise at the 1 % this is about).
Every side (the hand loop, accelkit's Fabric, and Lightning Fabric and Accelerate where installed), each in a fresh
interpreter, on one process and on two (DDP over gloo): after a warm-up epoch and an uncounted one (the peak resident
memory is read there, before any counting), rank 0 runs one whole epoch under ``torch.profiler`` (the collectives
per step: the process group's ``c10d::`` operators, as ``bench_ddp.py --only counts`` counts them) and the next
under ``sys.settrace`` with opcode events (the Python instructions per step, the sampler's epoch and the loader's
start included, as in a timed epoch). Printed per side: instructions, collectives and peak memory, and each
framework's ratio to the hand loop; for accelkit also the functions where its instructions differ most from the
hand loop's. Accelerate runs with ``USE_TORCH_XLA=0``: where torch_xla is installed it would otherwise take the
XLA device (PJRT on the host) despite ``cpu=True``, and time lazy tensors instead of this loop.

``--only ops``: on two processes, what costs CPU below Python, per side on rank 0: the operators per step
(``torch.profiler``'s ``key_averages()`` counts, not times) and those that differ from the hand loop's; the threads
alive during the epochs (Python's, and the native ones ``/proc/self/task`` adds), the CPU time of the training
thread and of the others per step (by thread name); the intra-op and inter-op thread counts; the options of the
``DistributedDataParallel`` wrapper.

``--only paired``: accelkit's Fabric against the hand loop with the machine's drift taken out, on one process and on
two. Each rank is one interpreter holding three loops over the same process group: accelkit's, the hand loop's, and
the hand loop's again (the control: what the method reads between two identical loops). An epoch walks their
loaders together, one step of each in turn, the order rotated from step to step, and times every step with the fetch
of its batch. Printed, for accelkit and for the control against the hand loop: the ratio of the median step times and
the median of the step-by-step ratios with its interquartile range, by wall and by CPU time. Separate interpreters
(the rounds above) see different moments of a shared machine; adjacent steps in one process see the same.

    .venv/bin/python benchmarks/bench_fabric.py [--rounds 5] [--epochs 4] [--samples 8192] [--paired-epochs 20]
                                                [--only one|ddp|counts|ops|paired]
                                                [--sides accelkit,lightning,accelerate]
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import itertools
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

SIDES = ("hand loop", "accelkit", "lightning", "accelerate")
#: what each side needs installed, beyond torch
NEEDS = {"accelkit": "accelkit", "lightning": "lightning", "accelerate": "accelerate"}


def model_and_data(samples: int):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(samples, 32, generator=generator)
    data = torch.utils.data.TensorDataset(x, (x[:, :4] > 0).long().sum(1) % 4)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), data


def timed_epochs(loader, epochs: int, step, set_epoch=None) -> tuple[float, float]:
    """Run ``epochs`` epochs of ``step(x, y)``; the median per-step wall time and CPU time (this process's, its threads
    included) of the epochs after the first."""
    figures = [timed_epoch(loader, step, set_epoch, epoch) for epoch in range(epochs)]
    return statistics.median(wall for wall, _ in figures[1:]), statistics.median(cpu for _, cpu in figures[1:])


def timed_epoch(loader: Any, step: Callable[[Any, Any], None], set_epoch: Any, epoch: int) -> tuple[float, float]:
    """One epoch of ``step`` over ``loader`` (the sampler's epoch set first where ``set_epoch`` is given): its per-step
    wall time and CPU time (this process's, its threads included)."""
    start, start_cpu, steps = time.perf_counter(), time.process_time(), 0
    if set_epoch is not None:
        set_epoch(epoch)
    for x, y in loader:
        step(x, y)
        steps += 1
    return (time.perf_counter() - start) / steps, (time.process_time() - start_cpu) / steps


def hand_loop(args: argparse.Namespace) -> tuple[int, tuple[float, float]]:
    rank, loader, step, set_epoch = build_hand_loop(args)
    seconds = timed_epochs(loader, args.epochs, step, set_epoch)
    if args.processes > 1:
        import torch.distributed as dist

        dist.destroy_process_group()
    return rank, seconds


def build_hand_loop(args: argparse.Namespace) -> tuple[int, Any, Callable[[Any, Any], None], Any]:
    """The hand loop's ``(rank, loader, step, set_epoch)`` (``set_epoch`` ``None`` on one process)."""
    import torch
    import torch.distributed as dist
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, DistributedSampler

    model, optimizer, data = model_and_data(args.samples)
    rank, sampler = 0, None
    if args.processes > 1:
        if not dist.is_initialized():  # ``--only paired``: the Fabric built first has initialized it
            dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)
        sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, batch_size=64, shuffle=sampler is None, sampler=sampler)

    def step(x, y):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return rank, loader, step, sampler.set_epoch if sampler is not None else None


def fabric_loop(args: argparse.Namespace, fabric_class) -> tuple[int, tuple[float, float]]:
    rank, loader, step, _ = build_fabric_loop(args, fabric_class)
    return rank, timed_epochs(loader, args.epochs, step)


def build_fabric_loop(args: argparse.Namespace, fabric_class) -> tuple[int, Any, Callable[[Any, Any], None], Any]:
    """The Fabric loop's ``(rank, loader, step, None)``: the loader sets the sampler's epoch itself."""
    from torch.nn import functional as F
    from torch.utils.data import DataLoader

    fabric = fabric_class(accelerator="cpu", devices=args.processes,
                          strategy="ddp" if args.processes > 1 else "auto")
    fabric.launch()
    model, optimizer, data = model_and_data(args.samples)
    model, optimizer = fabric.setup(model, optimizer)
    loader = fabric.setup_dataloaders(DataLoader(data, batch_size=64, shuffle=True))

    def step(x, y):
        optimizer.zero_grad()
        fabric.backward(F.cross_entropy(model(x), y))
        optimizer.step()

    return fabric.global_rank, loader, step, None


def accelerate_loop(args: argparse.Namespace) -> tuple[int, tuple[float, float]]:
    rank, loader, step, _ = build_accelerate_loop(args)
    return rank, timed_epochs(loader, args.epochs, step)


def build_accelerate_loop(args: argparse.Namespace) -> tuple[int, Any, Callable[[Any, Any], None], Any]:
    """The Accelerate loop's ``(rank, loader, step, None)``: its prepared loader moves to the next epoch's order
    itself."""
    from accelerate import Accelerator
    from torch.nn import functional as F
    from torch.utils.data import DataLoader

    accelerator = Accelerator(cpu=True)
    if accelerator.device.type != "cpu" or accelerator.num_processes != args.processes:
        raise RuntimeError(f"Accelerate runs on {accelerator.device} with {accelerator.num_processes} process(es), "
                           f"not on the CPU with {args.processes}: the comparison would not be the same loop")
    model, optimizer, data = model_and_data(args.samples)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=64, shuffle=True))

    def step(x, y):
        optimizer.zero_grad()
        accelerator.backward(F.cross_entropy(model(x), y))
        optimizer.step()

    return accelerator.process_index, loader, step, None


class InstructionCounter:
    """Python instructions (``sys.settrace`` opcode events), in all and per function, while installed."""

    def __init__(self) -> None:
        self.count = 0
        self.by_function: collections.Counter[str] = collections.Counter()

    def trace(self, frame: Any, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            self.count += 1
            code = frame.f_code
            path = code.co_filename.rsplit("site-packages/", 1)[-1].rsplit("src/", 1)[-1]
            self.by_function[f"{os.path.basename(path) if path == code.co_filename else path}:"
                             f"{getattr(code, 'co_qualname', code.co_name)}"] += 1
        return self.trace

    def run(self, function: Callable[[], Any]) -> None:
        """Run ``function`` traced (its frame and every frame it starts)."""
        # Python 3.12 turns opcode events on at settrace only if a frame asked for them before
        sys._getframe().f_trace_opcodes = True
        sys.settrace(self.trace)
        try:
            function()
        finally:
            sys.settrace(None)


def epoch_runner(loader: Any, step: Callable[[Any, Any], None],
                 set_epoch: Any) -> tuple[Callable[[int], None], list[int]]:
    """``epoch(index)``, one epoch of ``step`` over ``loader`` (the sampler's epoch set first), and the one-element
    list counting the steps it ran (the caller resets it between the epochs it measures)."""
    steps = [0]

    def epoch(index: int) -> None:
        if set_epoch is not None:
            set_epoch(index)
        for x, y in loader:
            step(x, y)
            steps[0] += 1

    return epoch, steps


def counted_epochs(loader: Any, step: Callable[[Any, Any], None], set_epoch: Any) -> dict[str, Any]:
    """Four epochs: a warm-up, one plain (the peak memory is read after it), one under ``torch.profiler`` (the
    collectives), one under :class:`InstructionCounter`; per-step figures of the counted ones."""
    from torch.profiler import ProfilerActivity, profile

    epoch, steps = epoch_runner(loader, step, set_epoch)

    epoch(0)
    epoch(1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    steps[0] = 0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        epoch(2)
    profiled = steps[0]
    collectives = collections.Counter(e.name for e in prof.events() if e.name.startswith("c10d::"))
    counter = InstructionCounter()
    steps[0] = 0
    counter.run(lambda: epoch(3))
    if counter.count == 0:
        raise RuntimeError("sys.settrace saw no Python instruction in a counted epoch that ran: nothing was counted")
    return {"instructions": counter.count / steps[0], "collectives": sum(collectives.values()) / profiled,
            "collective_ops": {name: n / profiled for name, n in collectives.items()},
            "functions": {name: n / steps[0] for name, n in counter.by_function.items()}, "peak_mib": peak}


def distributed_wrappers() -> list[dict[str, Any]]:
    """The ``DistributedDataParallel`` constructor options of every wrapper alive in this process (found through the
    garbage collector: each side holds its own in its step)."""
    import gc

    import torch

    found = []
    for obj in gc.get_objects():
        if isinstance(obj, torch.nn.parallel.DistributedDataParallel):
            found.append({
                "wrapped": type(obj.module).__name__, "bucket_bytes_cap": obj.bucket_bytes_cap,
                "find_unused_parameters": obj.find_unused_parameters, "static_graph": obj.static_graph,
                "gradient_as_bucket_view": obj.gradient_as_bucket_view, "broadcast_buffers": obj.broadcast_buffers,
                "device_ids": obj.device_ids, "comm_hook": obj._comm_hooks != [] if hasattr(obj, "_comm_hooks")
                else None, "forward_pre_hooks": len(obj._forward_pre_hooks), "forward_hooks": len(obj._forward_hooks),
            })
    return found


def thread_cpu() -> dict[str, float]:
    """This process's CPU seconds so far by thread (``/proc/self/task/*/stat``'s user + system clock ticks), named as
    Python names its threads, the others ``native <tid>``; empty where ``/proc`` cannot tell."""
    import threading

    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return {}
    found = {}
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        found[names.get(int(tid), f"native {tid}")] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return found


class CCallCounter:
    """Calls of C functions (``sys.setprofile``'s ``c_call`` events: builtins and extension functions such as
    torch's bindings, which neither the Python instruction count nor the operator list shows) by name."""

    def __init__(self) -> None:
        self.by_name: collections.Counter[str] = collections.Counter()

    def profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "c_call":
            module, name = getattr(arg, "__module__", None), getattr(arg, "__qualname__", None) or repr(arg)
            self.by_name[f"{module}.{name}" if module else name] += 1  # a method: its qualname names its type

    def run(self, function: Callable[[], Any]) -> None:
        """Run ``function`` profiled."""
        sys.setprofile(self.profile)
        try:
            function()
        finally:
            sys.setprofile(None)


def ops_epochs(loader: Any, step: Callable[[Any, Any], None], set_epoch: Any, epochs: int) -> dict[str, Any]:
    """A warm-up epoch, ``epochs - 1`` plain ones (the CPU time of the training thread and of the process's other
    threads, by name; the threads alive, the torch thread settings, the DDP wrappers' options), then one under
    ``torch.profiler``: every operator's calls per step (``key_averages()`` counts, not times)."""
    import gc
    import threading

    import torch
    from torch.profiler import ProfilerActivity, profile

    epoch, steps = epoch_runner(loader, step, set_epoch)
    epoch(0)
    steps[0] = 0
    collections_before = [generation["collections"] for generation in gc.get_stats()]
    usage = resource.getrusage(resource.RUSAGE_SELF)
    before, main_start, start = thread_cpu(), time.thread_time(), time.process_time()
    for index in range(1, epochs):
        epoch(index)
    main_cpu, process_cpu, after = time.thread_time() - main_start, time.process_time() - start, thread_cpu()
    plain, usage_after = steps[0], resource.getrusage(resource.RUSAGE_SELF)
    switches = ((usage_after.ru_nvcsw - usage.ru_nvcsw) / plain, (usage_after.ru_nivcsw - usage.ru_nivcsw) / plain)
    gc_per_step = [(generation["collections"] - was) / plain
                   for generation, was in zip(gc.get_stats(), collections_before, strict=True)]
    threads = sorted(thread.name for thread in threading.enumerate())
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:
        tasks = -1
    steps[0] = 0
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        epoch(epochs)
    ops = {event.key: event.count / steps[0] for event in prof.key_averages()}
    profiled, steps[0] = steps[0], 0
    c_calls = CCallCounter()
    c_calls.run(lambda: epoch(epochs + 1))
    return {"ops": ops, "steps": profiled, "gc_per_step": gc_per_step, "switches_per_step": switches,
            "c_calls": {name: n / steps[0] for name, n in c_calls.by_name.items()}, "python_threads": threads,
            "native_threads": tasks - len(threads),
            "num_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "ddp": distributed_wrappers(), "main_cpu_us": main_cpu / plain * 1e6,
            "other_cpu_us": (process_cpu - main_cpu) / plain * 1e6,
            "thread_cpu_ms": {name: (after.get(name, 0.0) - before.get(name, 0.0)) * 1e3
                              for name in after if after.get(name, 0.0) != before.get(name, 0.0)}}


def count_worker(args: argparse.Namespace) -> None:
    """The counts of one side (in its own interpreter): rank 0 prints ``RESULT {json}``."""
    if args.worker == "hand loop":
        rank, loader, step, set_epoch = build_hand_loop(args)
    elif args.worker == "accelkit":
        from accelkit import Fabric

        rank, loader, step, set_epoch = build_fabric_loop(args, Fabric)
    elif args.worker == "lightning":
        from lightning.fabric import Fabric as LightningFabric

        rank, loader, step, set_epoch = build_fabric_loop(args, LightningFabric)
    else:
        rank, loader, step, set_epoch = build_accelerate_loop(args)
    result = ops_epochs(loader, step, set_epoch, args.epochs) if args.ops else counted_epochs(loader, step, set_epoch)
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    if args.processes > 1 and args.worker == "hand loop":
        import torch.distributed as dist

        dist.destroy_process_group()


def paired_worker(args: argparse.Namespace) -> None:
    """``--only paired`` in one interpreter per rank: accelkit's Fabric loop, the hand loop and a second hand loop (the
    control) built side by side over the same process group (the Fabric's). Each of ``--paired-epochs`` epochs walks
    the three loaders together, one step of each in turn, the order rotated from step to step; every step is timed
    with the fetch of its batch (an epoch's first step also with the loader's start and the sampler's epoch). Rank 0
    prints ``RESULT {json}``: per side, the per-step wall and CPU times, in step order."""
    from accelkit import Fabric

    rank, fabric_loader, fabric_step, _ = build_fabric_loop(args, Fabric)
    loops = {"accelkit": (fabric_loader, fabric_step, None)}
    for side in ("hand loop", "hand loop again"):
        _, loader, step, set_epoch = build_hand_loop(args)
        loops[side] = (loader, step, set_epoch)
    sides = list(loops)
    times: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    for epoch in range(args.paired_epochs + 1):  # the first epoch warms up, untimed
        iterators: dict[str, Any] = {}
        for index in itertools.count():
            order = sides[index % 3:] + sides[:index % 3]
            ended = False
            for side in order:
                wall, cpu = time.perf_counter(), time.process_time()
                if side not in iterators:
                    loader, _, set_epoch = loops[side]
                    if set_epoch is not None:
                        set_epoch(epoch)
                    iterators[side] = iter(loader)
                batch = next(iterators[side], None)
                if batch is None:
                    ended = True
                    continue
                loops[side][1](*batch)
                if epoch:
                    times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
            if ended:
                break
    if rank == 0:
        print("RESULT " + json.dumps(times), flush=True)


def print_paired(args: argparse.Namespace, processes: int) -> None:
    """Measure and print ``--only paired`` on ``processes`` processes. For accelkit and for the control (the second
    hand loop), each against the hand loop: the ratio of the median step times and the median of the step-by-step
    ratios with its interquartile range, by wall and by CPU time."""
    title = "one process" if processes == 1 else f"{processes} processes, DDP over gloo"
    print(f"\n== paired steps in one interpreter per rank, {title}: {args.paired_epochs} epochs", flush=True)
    times = measure("paired", args, processes)
    hand = times["hand loop"]
    for side in ("accelkit", "hand loop again"):
        for index, clock in ((0, "wall"), (1, "CPU")):
            ours, theirs = [t[index] for t in times[side]], [t[index] for t in hand]
            ratios = [a / b for a, b in zip(ours, theirs, strict=True) if b > 0]
            quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
            of_medians = statistics.median(ours) / statistics.median(theirs)
            print(f"-- paired, {title}: {side} / hand loop by {clock} time x{of_medians:.4f} (median steps "
                  f"{statistics.median(ours) * 1e6:.1f} / {statistics.median(theirs) * 1e6:.1f} us); step by step "
                  f"x{statistics.median(ratios):.4f}, interquartile x{quartiles[0]:.4f}-x{quartiles[2]:.4f} over "
                  f"{len(ratios)} steps", flush=True)


def worker(args: argparse.Namespace) -> None:
    """One measurement of one side (in its own interpreter): rank 0 prints ``RESULT {json}``."""
    if args.count or args.ops:
        count_worker(args)
        return
    if args.worker == "paired":
        paired_worker(args)
        return
    if args.worker == "hand loop":
        rank, seconds = hand_loop(args)
    elif args.worker == "accelkit":
        from accelkit import Fabric

        rank, seconds = fabric_loop(args, Fabric)
    elif args.worker == "lightning":
        from lightning.fabric import Fabric

        rank, seconds = fabric_loop(args, Fabric)
    else:
        rank, seconds = accelerate_loop(args)
    if rank == 0:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print("RESULT " + json.dumps({"seconds": seconds[0], "cpu_seconds": seconds[1], "peak_mib": peak}), flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(side: str, args: argparse.Namespace, processes: int, count: bool = False, ops: bool = False
            ) -> dict[str, Any]:
    """Run one measurement of ``side`` on ``processes`` processes (its counts with ``count``, its operators and
    threads with ``ops``); its rank 0's result."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", side, "--processes", str(processes),
               "--epochs", str(args.epochs), "--samples", str(args.samples), "--paired-epochs",
               str(args.paired_epochs)
               ] + (["--count"] if count else []) + (
               ["--ops"] if ops else [])
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="")
    if side == "accelerate":  # with torch_xla installed Accelerate picks the XLA device even with cpu=True (PJRT on
        env["USE_TORCH_XLA"] = "0"  # the host: lazy tensors, not this loop); its own switch keeps it on the CPU
    # the frameworks' Fabrics start their second process themselves; the others are started here, as torchrun would
    started_here = processes if side in ("hand loop", "accelerate") and processes > 1 else 1
    port = str(free_port())
    procs = []
    for rank in range(started_here):
        rank_env = dict(env)
        if started_here > 1:
            rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(processes),
                            LOCAL_WORLD_SIZE=str(processes), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(command, env=rank_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outputs = [proc.communicate(timeout=args.timeout) for proc in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            raise SystemExit(f"{side} on {processes} process(es) failed (exit {proc.returncode}):\n{out}\n"
                             f"{err[-3000:]}")
    line = next(line for out, _ in outputs for line in out.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def compare(args: argparse.Namespace, sides: list[str], processes: int) -> None:
    title = "one process" if processes == 1 else f"{processes} processes, DDP over gloo"
    print(f"\n== {title}: sides: {', '.join(sides)}", flush=True)
    results: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    ratios: dict[str, list[float]] = {side: [] for side in sides if side != "hand loop"}
    cpu_ratios: dict[str, list[float]] = {side: [] for side in sides if side != "hand loop"}
    for round_index in range(args.rounds):
        order = sides[round_index % len(sides):] + sides[:round_index % len(sides)]
        print(f"round {round_index + 1}/{args.rounds} ({' > '.join(order)})", flush=True)
        measured = {side: measure(side, args, processes) for side in order}
        for side in order:
            results[side].append(measured[side])
            ratio = measured[side]["seconds"] / measured["hand loop"]["seconds"]
            cpu_ratio = measured[side]["cpu_seconds"] / measured["hand loop"]["cpu_seconds"]
            if side != "hand loop":
                ratios[side].append(ratio)
                cpu_ratios[side].append(cpu_ratio)
            print(f"  {side:<11}: {measured[side]['seconds'] * 1e6:9.1f} us/step  x{ratio:.4f}   (CPU "
                  f"{measured[side]['cpu_seconds'] * 1e6:9.1f} us/step  x{cpu_ratio:.4f})", flush=True)
    hand_peak = statistics.median(r["peak_mib"] for r in results["hand loop"])
    print(f"-- {title}: hand loop {statistics.median(r['seconds'] for r in results['hand loop']) * 1e6:.1f} us/step, "
          f"peak {hand_peak:.0f} MiB")
    for side, values in ratios.items():
        peak = statistics.median(r["peak_mib"] for r in results[side])
        print(f"-- {title}: {side} / hand loop: ratio to the hand loop x{statistics.median(values):.4f} (spread "
              f"x{min(values):.4f}-x{max(values):.4f} over {len(values)} rounds), by CPU time "
              f"x{statistics.median(cpu_ratios[side]):.4f} (spread x{min(cpu_ratios[side]):.4f}-"
              f"x{max(cpu_ratios[side]):.4f}), peak {peak:.0f} MiB (x{peak / hand_peak:.3f})", flush=True)


def print_counts(args: argparse.Namespace, processes: int, sides: list[str]) -> dict[str, dict[str, Any]]:
    """Measure and print the per-step counts of ``sides`` (the hand loop and accelkit's Fabric first, then Lightning
    Fabric and Accelerate where installed), each framework's ratios to the hand loop, and where accelkit's
    instructions differ from the hand loop's; returns the counts."""
    title = "one process" if processes == 1 else f"{processes} processes, DDP over gloo"
    print(f"\n== counts per step, rank 0, {title}:", flush=True)
    result = {side: measure(side, args, processes, count=True) for side in sides}
    for side, figures in result.items():
        print(f"  {side:<9}: {figures['instructions']:.1f} Python instructions, {figures['collectives']:.2f} "
              f"collectives per step, peak {figures['peak_mib']:.0f} MiB", flush=True)
    hand, ours = result["hand loop"], result["accelkit"]
    for side in sides[1:]:
        theirs = result[side]
        print(f"-- counts, {title}: {side} / hand loop: Python instructions per step "
              f"x{theirs['instructions'] / hand['instructions']:.4f} "
              f"(+{theirs['instructions'] - hand['instructions']:.1f}), collectives per step "
              f"{hand['collectives']:.2f} -> {theirs['collectives']:.2f}, peak memory "
              f"x{theirs['peak_mib'] / hand['peak_mib']:.3f}", flush=True)
    extra = {name: ours["functions"].get(name, 0.0) - hand["functions"].get(name, 0.0)
             for name in set(hand["functions"]) | set(ours["functions"])}
    largest = [name for name in sorted(extra, key=lambda n: (-abs(extra[n]), n)) if abs(extra[name]) >= 0.5][:12]
    print("  Python instructions per step, accelkit minus hand loop, by function (the largest): "
          + (", ".join(f"{name} {extra[name]:+.1f}" for name in largest) or "nothing"), flush=True)
    return result


def print_ops(args: argparse.Namespace, sides: list[str]) -> dict[str, dict[str, Any]]:
    """On two processes (DDP over gloo), per side on rank 0: the operators per step that differ from the hand
    loop's (``torch.profiler`` counts), the threads alive during the epochs and the CPU time outside the training
    thread, the torch thread settings and the DDP wrapper's options; returns the figures."""
    print("\n== operators and threads per step, rank 0, 2 processes, DDP over gloo:", flush=True)
    result = {side: measure(side, args, 2, ops=True) for side in sides}
    hand = result["hand loop"]
    for side, figures in result.items():
        ops = figures["ops"]
        print(f"  {side:<10}: {sum(ops.values()):.2f} operator calls per step ({len(ops)} operators), "
              f"{figures['num_threads']} intra-op / {figures['interop_threads']} inter-op threads, "
              f"{len(figures['python_threads'])} Python threads ({', '.join(figures['python_threads'])}) + "
              f"{figures['native_threads']} native, CPU per step: training thread {figures['main_cpu_us']:.1f} us, "
              f"other threads {figures['other_cpu_us']:.1f} us", flush=True)
        busy = sorted(figures["thread_cpu_ms"].items(), key=lambda item: -item[1])
        print(f"    CPU by thread over the plain epochs: {', '.join(f'{n} {ms:.0f} ms' for n, ms in busy) or 'none'}; "
              f"garbage collections per step by generation: "
              f"{', '.join(f'{n:.3f}' for n in figures['gc_per_step'])}; "
              f"context switches per step {figures['switches_per_step'][0]:.2f} voluntary, "
              f"{figures['switches_per_step'][1]:.2f} involuntary; "
              f"{sum(figures['c_calls'].values()):.1f} C function calls per step")
        for wrapper in figures["ddp"]:
            print(f"    DistributedDataParallel: {', '.join(f'{k}={v}' for k, v in wrapper.items())}")
        if side == "hand loop":
            continue
        names = set(ops) | set(hand["ops"])
        delta = {name: ops.get(name, 0.0) - hand["ops"].get(name, 0.0) for name in names}
        differ = sorted((name for name in names if abs(delta[name]) * figures["steps"] >= 0.5),
                        key=lambda n: (-abs(delta[n]), n))
        print(f"-- ops, {side} minus hand loop, calls per step: "
              + (", ".join(f"{name} {delta[name]:+.3f}" for name in differ) or "none"), flush=True)
        names = set(figures["c_calls"]) | set(hand["c_calls"])
        delta = {name: figures["c_calls"].get(name, 0.0) - hand["c_calls"].get(name, 0.0) for name in names}
        differ = sorted((name for name in names if abs(delta[name]) >= 0.05), key=lambda n: (-abs(delta[n]), n))
        print(f"-- C calls, {side} minus hand loop, per step: "
              + (", ".join(f"{name} {delta[name]:+.2f}" for name in differ[:25]) or "none"), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4, help="epochs per run; the first is warm-up")
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--only", choices=("one", "ddp", "counts", "ops", "paired"), default=None)
    parser.add_argument("--paired-epochs", type=int, default=20,
                        help="--only paired: timed epochs, each walking the loops step by step in turn")
    parser.add_argument("--sides", default=",".join(SIDES[1:]),
                        help="the frameworks compared with the hand loop, comma-separated (default: all of "
                             f"{', '.join(SIDES[1:])} that are installed)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds one measurement may take")
    parser.add_argument("--worker", choices=SIDES + ("paired",), help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--count", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ops", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.epochs < 2:
        parser.error(f"--epochs {args.epochs}: give at least 2 (the first epoch is warm-up, not timed)")
    if args.worker:
        worker(args)
        return
    if args.paired_epochs < 1:
        parser.error(f"--paired-epochs {args.paired_epochs}: give at least 1")
    if args.only in ("counts", "ops", "paired") and importlib.util.find_spec("accelkit") is None:
        parser.error(f"--only {args.only} compares accelkit's Fabric with the hand loop: accelkit is not installed")
    asked = [side.strip() for side in args.sides.split(",") if side.strip()]
    unknown = [side for side in asked if side not in SIDES[1:]]
    if unknown or not asked:
        parser.error(f"--sides {args.sides!r}: {', '.join(unknown) or 'nothing'} is not a side; give some of "
                     f"{', '.join(SIDES[1:])}, comma-separated")
    if args.only in ("counts", "ops", "paired") and "accelkit" not in asked:
        parser.error(f"--only {args.only} compares accelkit's Fabric with the hand loop: --sides must name accelkit")
    sides = ["hand loop"]
    for side in (side for side in SIDES[1:] if side in asked):
        if importlib.util.find_spec(NEEDS[side]) is None:
            print(f"{side}: not installed ({NEEDS[side]}), its side is skipped")
        else:
            sides.append(side)
    if args.only == "ops":
        print_ops(args, sides)
        return
    if args.only == "paired":
        if sides != ["hand loop", "accelkit"]:
            print(f"--only paired compares accelkit's Fabric with the hand loop only: {', '.join(sides[2:])} "
                  "not measured (their rounds: --only one or ddp)")
        print_paired(args, 1)
        print_paired(args, 2)
        return
    if args.only == "counts":
        print_counts(args, 1, sides)
        print_counts(args, 2, sides)
        return
    if args.only in (None, "one"):
        compare(args, sides, 1)
    if args.only in (None, "ddp"):
        compare(args, sides, 2)


if __name__ == "__main__":
    main()
