"""Data-parallel strategies over ``torch.distributed``: joining launched processes (``ddp``) and starting them
(``ddp_spawn``). Device-neutral: the backend comes from the accelerator."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

import torch
import torch.distributed as dist
from torch import nn

from accelkit.errors import ConfigurationError
from accelkit.strategies.base import NULL_CONTEXT, StepRouter
from accelkit.strategies.parallel import ParallelStrategy
from accelkit.strategies.rendezvous import (
    agreement_store,
    in_this_attempt,
    listen_on_loopback,
    rendezvous_store,
    uses_launcher_store,
)

if TYPE_CHECKING:
    from torch.distributed import Store

    from accelkit.accelerator import Accelerator
    from accelkit.environments.base import ClusterEnvironment
    from accelkit.environments.torchrun import AgreementStore
    from accelkit.precision import Precision
    from accelkit.strategies.launchers.base import Launcher

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

#: seconds a process waits for the others to join before saying so (and, with stale launcher variables that no
#: launcher process stands behind, before it stops); ``ACCELKIT_JOIN_WAIT_S`` sets another value
STILL_WAITING_S = 30.0
#: the environment variable that replaces :data:`STILL_WAITING_S` (a positive number of seconds)
JOIN_WAIT_ENV = "ACCELKIT_JOIN_WAIT_S"
_REDUCE_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}


class DDPStrategy(ParallelStrategy):
    """Data parallel over ``torch.distributed``: one process per device, gradients all-reduced in backward.

    This class joins processes that something else started (``torchrun``, SLURM's ``srun``, ``mpirun``...): the
    ranks, world size and rendezvous address come from its ``cluster_environment`` (see
    ``accelkit.environments.base``).
    Options not consumed here (``find_unused_parameters``, ``static_graph``, ...) go to
    :class:`torch.nn.parallel.DistributedDataParallel`.
    """

    #: whether :meth:`teardown` destroys the process group (set once this strategy created it)
    _owns_process_group: bool = False
    #: every process holds the whole model and optimizer state (:attr:`~accelkit.Strategy.replicates_state`)
    replicates_state: bool = True
    _DDP_OPTIONS = ("find_unused_parameters", "static_graph", "gradient_as_bucket_view", "broadcast_buffers",
                    "bucket_cap_mb")

    def __init__(self, timeout_s: float | None = None, **options: Any) -> None:
        unknown = sorted(set(options) - set(self._DDP_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"unknown DDP option(s) {unknown}; DistributedDataParallel options accepted: {list(self._DDP_OPTIONS)}"
            )
        super().__init__(**options)
        self.timeout_s = timeout_s

    def connect(self, accelerator: Accelerator, devices: list[int], num_nodes: int, precision: Precision) -> None:
        """As the base class; a :class:`~accelkit.environments.script.ScriptEnvironment` (this process will start
        its peers itself) learns the run's layout here, before :meth:`validate` compares it."""
        super().connect(accelerator, devices, num_nodes, precision)
        from accelkit.environments.script import ScriptEnvironment

        if isinstance(self.cluster_environment, ScriptEnvironment):
            self.cluster_environment.plan(self.processes_per_node, num_nodes)
        from accelkit.environments.torchrun import TorchrunEnvironment

        if isinstance(self.cluster_environment, TorchrunEnvironment):  # how its processes reach their store
            self.cluster_environment.store_opener = self._agreement_store
            self.cluster_environment.wait_limit_s = self._join_timeout_s

    def _join_timeout_s(self) -> float:
        """How long the processes wait for each other to join the run (agree on the attempt, form the process
        group): the strategy's ``timeout_s`` where given, else the collective timeout."""
        return self.timeout_s if self.timeout_s is not None else self.collective_timeout_s

    def _agreement_store(self) -> AgreementStore:
        """This attempt's rendezvous store, opened before the process group for the processes to agree on the
        attempt (:func:`~accelkit.strategies.rendezvous.agreement_store`), waiting at most
        :meth:`_join_timeout_s`."""
        env = self.launcher_environment()
        store = agreement_store(self.global_rank, self.world_size, self._join_timeout_s(),
                                spans_machines=(env.num_nodes if env is not None else self.num_nodes) > 1)
        return cast("AgreementStore", store)  # a TCPStore: it has the timeout torch's type stubs leave out

    # the outside launcher's environment
    def launcher_environment(self) -> ClusterEnvironment | None:
        """The :class:`~accelkit.environments.base.ClusterEnvironment` whose processes this strategy joins, or ``None``.

        The resolver sets ``cluster_environment`` (detected once, through every plugin's environments); a
        strategy built by hand and never composed asks the core's built-in environments itself. An environment
        whose launcher starts one process per host that spawns its own workers (a TPU pod) is nothing to join.
        """
        environment = self.cluster_environment
        if environment is None:
            if "_builtin_environment" not in self.__dict__:  # asked once: ranks are read on every log call
                from accelkit.environments.detection import detect_cluster_environment

                self._builtin_environment = detect_cluster_environment(None)
            environment = self._builtin_environment
        if environment is None or not getattr(environment, "launches_every_process", True):
            return None
        return environment

    def validate(self) -> list[str]:
        env = self.launcher_environment()
        if env is None:
            if self.world_size == 1:
                return []
            return [(
                f"strategy {self.name or 'ddp'!r} joins processes started by a launcher, but RANK/WORLD_SIZE/"
                f"LOCAL_RANK are not set: start the script with `torchrun --nproc-per-node {len(self.devices)} "
                f"--nnodes {self.num_nodes} ...` (or srun, mpirun), or use strategy='ddp_spawn' to let accelkit "
                "start the processes."
            )]
        problems = env.validate()
        if problems:
            return problems
        if env.world_size != self.world_size and "TORCHELASTIC_RUN_ID" in env.env and \
                env.num_nodes != self.num_nodes:
            return [(
                f"num_nodes={self.num_nodes} was given, but torchrun started this attempt on {env.num_nodes} node(s) "
                f"(GROUP_WORLD_SIZE={env.env.get('GROUP_WORLD_SIZE', '?')}, WORLD_SIZE={env.world_size}): torchrun "
                "is an elastic launcher (--nnodes=MIN:MAX, --max-restarts), whose number of nodes may change from one "
                "attempt to the next. Leave num_nodes out of the Trainer: it is then taken from the launcher on every "
                f"attempt (or launch with --nnodes={self.num_nodes})."
            )]
        if env.world_size != self.world_size:
            return [(
                f"the launcher started {env.world_size} processes ({env.name}: {env.reason()}) but devices="
                f"{self.devices} x num_nodes={self.num_nodes} = {self.world_size}; make them agree (torchrun "
                "--nproc-per-node / srun --ntasks-per-node must equal devices, --nnodes / --nodes must equal "
                "num_nodes)."
            )]
        return []

    def create_launcher(self) -> Launcher:
        """Joins processes an outside launcher started (in place when there is nothing to join); with a
        :class:`~accelkit.environments.script.ScriptEnvironment`, starts them by running the script again."""
        from accelkit.environments.script import ScriptEnvironment
        from accelkit.strategies.launchers.in_place import ExternalLauncher, InPlaceLauncher
        from accelkit.strategies.launchers.script import ScriptLauncher

        env = self.launcher_environment()
        if isinstance(env, ScriptEnvironment):  # no launcher: this process starts the others (Fabric.launch())
            return ScriptLauncher(env)
        return InPlaceLauncher() if env is None else ExternalLauncher(env)

    @property
    def local_rank(self) -> int:
        """The launcher's local rank when joining one (read from ``cluster_environment``)."""
        env = self.launcher_environment()
        return env.local_rank if env is not None else super().local_rank

    @property
    def node_rank(self) -> int:
        """When joining a launcher: the global rank over ``processes_per_node`` (processes placed node by
        node, which every launcher here does)."""
        env = self.launcher_environment()
        return env.global_rank // max(self.processes_per_node, 1) if env is not None else super().node_rank

    @property
    def global_rank(self) -> int:
        """The launcher's global rank when joining one."""
        env = self.launcher_environment()
        return env.global_rank if env is not None else super().global_rank

    def _init_process_group(self) -> None:
        self._owns_process_group = False
        if dist.is_available() and not dist.is_initialized() and self.world_size > 1:
            env = self.launcher_environment()
            if env is not None:  # the rendezvous torch's env:// reads, as the launcher's environment gives it
                os.environ["MASTER_ADDR"] = env.main_address
                os.environ["MASTER_PORT"] = str(env.main_port)
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            from datetime import timedelta

            timeout = self._join_timeout_s()
            stale = env.stale_variables() if env is not None else None
            patience = join_wait_s()
            waiting = threading.Timer(patience, _still_waiting, args=(self, env, patience))
            waiting.daemon = True
            if not stale:
                waiting.start()
            try:
                # rank 0's store listens where MASTER_ADDR says (loopback for a run on this machine), not on
                # every interface as torch's env:// store does; with stale launcher variables, nobody will join:
                # wait join_wait_s(), then stop with what is wrong
                store = _join_store(self, min(timeout, patience) if stale else timeout, stale)
                if stale:  # they joined after all: the run's own timeout from here on
                    store.set_timeout(timedelta(seconds=timeout))
                dist.init_process_group(
                    backend=self.accelerator.distributed_backend,
                    rank=self.global_rank,
                    world_size=self.world_size,
                    timeout=timedelta(seconds=timeout),
                    store=store,
                )
            finally:
                waiting.cancel()
            self._owns_process_group = True
            from accelkit.strategies.launchers import watchdog

            watchdog.start(_watchdog_store(), self.global_rank, self.world_size, timeout,
                           store_owner=None if uses_launcher_store() else 0)

    def setup_environment(self) -> None:
        super().setup_environment()
        self._init_process_group()

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move and convert ``module``; while fitting on several processes, wrap it in ``DistributedDataParallel``.
        ``validate``, ``test`` and ``predict`` run the module itself, as in Lightning: there are no gradients to
        reduce, and ``trainer.model`` is then the user's module."""
        module = super().setup_module(module)
        if self.world_size == 1 or self.stage not in (None, "fit"):
            return module
        device_ids = self.accelerator.ddp_device_ids(self.root_device) if hasattr(
            self.accelerator, "ddp_device_ids") else None
        wrapped = nn.parallel.DistributedDataParallel(StepRouter(module), device_ids=device_ids, **self.options)
        _ParameterCheck(self, module, wrapped)
        return wrapped

    def no_backward_sync(self, model: nn.Module, enabled: bool) -> contextlib.AbstractContextManager[object]:
        if enabled and isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return NULL_CONTEXT

    def pre_manual_backward(self, model: nn.Module, loss: torch.Tensor) -> None:
        """Arm DDP's reducer for a backward pass that runs inside the forward (manual optimization): the
        gradients of this backward are then all-reduced as in an automatic step."""
        if not isinstance(model, nn.parallel.DistributedDataParallel):
            return
        if torch.is_grad_enabled() and model.require_backward_grad_sync:
            model.require_forward_param_sync = True
            reducer = model.reducer
            reducer._rebuild_buckets()
            unused = model.find_unused_parameters and not model.static_graph
            reducer.prepare_for_backward([loss] if unused else [])
        else:
            model.require_forward_param_sync = False

    def sync_buffers(self, model: nn.Module) -> None:
        """DDP's ``broadcast_buffers``: rank 0's buffers (batch-norm statistics...) to every rank."""
        if not (isinstance(model, nn.parallel.DistributedDataParallel) and model.broadcast_buffers):
            return
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for buffer in model.module.buffers():
            by_dtype.setdefault(buffer.dtype, []).append(buffer)
        for buffers in by_dtype.values():  # one collective per dtype, not one per buffer
            flat = torch.cat([b.reshape(-1) for b in buffers])
            dist.broadcast(flat, src=0)
            offset = 0
            for buffer in buffers:
                buffer.copy_(flat[offset:offset + buffer.numel()].view_as(buffer))
                offset += buffer.numel()

    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if not dist.is_initialized():
            return value
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce op {op!r} is not one of {sorted(_REDUCE_OPS)}")
        value = value.detach().clone()
        with _waiting("reduce"):
            dist.all_reduce(value, op=getattr(dist.ReduceOp, _REDUCE_OPS[op]))
        return value / self.world_size if op == "mean" else value

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        if not dist.is_initialized():
            return tensor.unsqueeze(0)
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        with _waiting("all_gather"):
            dist.all_gather(out, tensor.contiguous())
        return torch.stack(out)

    def barrier(self, name: str | None = None) -> None:
        if dist.is_initialized():
            with _waiting(f"barrier {name!r}" if name else "barrier"):
                dist.barrier()

    def broadcast(self, obj: _T, src: int = 0) -> _T:
        if not dist.is_initialized():
            return obj
        box = [obj]
        with _waiting("broadcast"):
            dist.broadcast_object_list(box, src=src)
        return box[0]

    def end_run(self) -> None:
        """A Fabric run ended in this process: the process group this strategy made is destroyed now, before the
        interpreter's own exit (which, with a gloo group still alive and its peers gone, can abort the process:
        ``terminate called without an active exception``). The watchdog's thread is stopped first: a daemon thread
        still inside a store call while the interpreter finalises aborts the process the same way. A group the user
        made stays."""
        from accelkit.strategies.launchers import watchdog

        super().end_run()
        watchdog.stop()
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False

    def teardown(self) -> None:
        """Destroy the process group if this strategy created it (a group the user made stays)."""
        from accelkit.strategies.launchers import watchdog

        watchdog.stop()
        if self._owns_process_group and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False
        super().teardown()


class _ParameterCheck:
    """Refuses a precision that replaced or re-cast a parameter after ``DistributedDataParallel`` wrapped the module:
    the wrapper's gradient all-reduce holds the parameters as they were, so the processes would train apart. Asked
    before the first two forward passes of the wrapper (a change in ``forward_context`` shows at the first, one in
    ``optimizer_step`` at the second), then removed: nothing per step afterwards."""

    def __init__(self, strategy: DDPStrategy, module: nn.Module, wrapped: nn.Module) -> None:
        self.precision, self.world_size, self.module = strategy.precision, strategy.world_size, module
        self.expected = [(name, p, p.dtype) for name, p in module.named_parameters()]
        self.remaining = 2
        self.handle = wrapped.register_forward_pre_hook(self)

    def __call__(self, _wrapped: nn.Module, _args: tuple[object, ...]) -> None:
        self.remaining -= 1
        problem = self.change()
        if problem or not self.remaining:
            self.handle.remove()
        if problem:
            raise ConfigurationError(problem)

    def change(self) -> str:
        """The sentence naming the first parameter replaced or re-cast since the module was wrapped, or ``""``."""
        now = dict(self.module.named_parameters())
        for name, param, dtype in self.expected:
            current = now.get(name)
            if current is not param:
                return self.refusal(f"replaced parameter {name!r}")
            if current.dtype != dtype:
                return self.refusal(f"cast parameter {name!r} from {str(dtype).removeprefix('torch.')} to "
                                    f"{str(current.dtype).removeprefix('torch.')}")
        return ""

    def refusal(self, change: str) -> str:
        """The whole sentence, for ``change`` (what the precision did)."""
        return (f"precision {self.precision.name!r} ({type(self.precision).__name__}) {change} after the module was "
                f"wrapped in DistributedDataParallel, whose gradient all-reduce holds the parameters as they were, "
                f"so the {self.world_size} processes would train apart; a precision may convert parameters only in "
                "convert_module, which runs before the strategy wraps the module (docs/plugins.rst, 'Precision')")


@contextlib.contextmanager
def _waiting(what: str) -> Iterator[None]:
    """Note for the watchdog that this process waits in a collective, then restore what it was doing; a collective
    that fails leaves the note as it is, for the diagnosis of the failure."""
    from accelkit.strategies.launchers import watchdog

    before = watchdog.phase()
    watchdog.mark(what)
    yield
    watchdog.mark(before)


def _watchdog_store() -> Store | None:
    """A client connection of its own to the run's rendezvous store, with a short timeout: the watchdog thread
    must never sit in a store call while its process exits. ``None`` where it cannot connect (no watchdog then)."""
    from datetime import timedelta

    try:
        return in_this_attempt(dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                             is_master=False, timeout=timedelta(seconds=5), wait_for_workers=False))
    except Exception:  # noqa: BLE001 - another rendezvous (file://, a custom store): the run has no watchdog
        return None


def _join_store(strategy: DDPStrategy, timeout: float, stale: str | None) -> Store:
    """The run's rendezvous store; when it cannot be had within ``timeout`` and ``stale`` names stale launcher
    variables, a :class:`~accelkit.errors.ConfigurationError` saying so (not the store's timeout)."""
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    try:
        # a store client retries past its timeout (~2.5 times it): with stale variables, wait for rank 0 here
        if stale and strategy.global_rank != 0 and not _accepts_within(host, port, timeout):
            raise TimeoutError(f"nothing listens at {host}:{port}")
        return rendezvous_store(strategy.global_rank, strategy.world_size, timeout,
                                spans_machines=strategy.num_nodes > 1)
    except (RuntimeError, ValueError, TimeoutError) as exc:  # torch's DistStoreError is a RuntimeError
        if not stale:
            raise
        raise ConfigurationError(
            f"rank {strategy.global_rank} waited {timeout:.0f} s for all {strategy.world_size} processes to join "
            f"at {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} and stops: {stale} Or use "
            "strategy='ddp_spawn' to start the processes here.") from exc


def _accepts_within(host: str, port: int, seconds: float) -> bool:
    """Whether something accepts TCP connections at ``host:port`` within ``seconds`` (tried twice a second)."""
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)


def join_wait_s() -> float:
    """Seconds a process waits for the others to join before saying so, and with stale launcher variables before it
    stops: ``ACCELKIT_JOIN_WAIT_S`` when set (a positive number), else :data:`STILL_WAITING_S` (30 s)."""
    raw = os.environ.get(JOIN_WAIT_ENV, "").strip()
    if not raw:
        return STILL_WAITING_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ConfigurationError(f"{JOIN_WAIT_ENV}={raw!r} is not a positive number of seconds: set it to one (such as "
                                 f"{STILL_WAITING_S:.0f}, the default) or unset it.")
    return seconds


def _still_waiting(strategy: DDPStrategy, env: ClusterEnvironment | None, waited: float) -> None:
    """Printed when joining the process group takes longer than :func:`join_wait_s`: who is expected, where, and the
    usual cause (for a restarted attempt of an elastic launcher, not stale variables)."""
    source = f"{env.name}: {env.reason()}" if env is not None else "set by accelkit"
    attempt = env.restart_attempt if env is not None else None
    if attempt:
        cause = (f"This is attempt {attempt} of a run its launcher restarts by itself (torchrun's rendezvous round, a "
                 "requeued job): the processes of this attempt have not all reached the process group yet (a node "
                 "still restarting or loading); the variables are not stale.")
    else:
        cause = ("If no launcher started the other processes, the variables are stale: unset RANK, WORLD_SIZE, "
                 "LOCAL_RANK (and SLURM_*/OMPI_* when not inside such a job), or use strategy='ddp_spawn'.")
    print(f"accelkit: rank {strategy.global_rank} has waited {waited:.0f} s for all {strategy.world_size} processes "
          f"to join at {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} ({source}). {cause} It gives "
          "up after the collective timeout (Trainer(collective_timeout=...)).", file=sys.stderr, flush=True)


def find_free_port() -> int:
    """A TCP port on the loopback interface that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# the mixin is only ever combined with a ParallelStrategy: the type checker reads it as one (its super() calls and
# the strategy attributes it reads); at run time its base is object
if TYPE_CHECKING:
    _MixedInto = ParallelStrategy
else:
    _MixedInto = object


class LocalRendezvous(_MixedInto):
    """Mixin for a ``torch.distributed`` strategy that may start its processes on this machine itself: a free
    rendezvous port is chosen when launching, and each worker sets the rank and rendezvous variables that
    ``env://`` reads, and takes its share of the host's cores. A class sets ``_spawns`` (``True`` here) to say
    whether this run starts its workers or joins processes a launcher started.
    """

    _main_port: int | None = None
    _spawns: bool = True

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Pick a free rendezvous port when starting the workers, then launch."""
        self._main_port = find_free_port() if self._spawns else None
        try:
            return super().launch(function, *args, **kwargs)
        finally:
            self._main_port = None

    def worker_init(self, index: int) -> None:
        """Rank ``index`` of ``len(devices)``: the rendezvous variables ``torch.distributed`` reads, and this
        worker's share of the host's cores."""
        from accelkit.strategies.launchers.spawn import share_cores

        super().worker_init(index)
        world = len(self.devices)
        share_cores(world)
        # every socket of the run on the loopback interface: nothing reachable from another machine
        listen_on_loopback(os.environ, tuple(getattr(self.accelerator, "socket_interface_variables", ())))
        os.environ["MASTER_PORT"] = str(self._main_port)
        os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(index)
        os.environ["WORLD_SIZE"] = str(world)


class DDPSpawnStrategy(LocalRendezvous, DDPStrategy):
    """Data parallel where accelkit starts one process per local device itself (a
    :class:`~accelkit.strategies.launchers.spawn.SpawnLauncher`, start method ``spawn``).

    The worker of rank 0 sends its results and trained weights back, and the Trainer loads them into the
    caller's module. If a worker dies, the others are stopped and a :class:`~accelkit.errors.WorkerError`
    carries the failed worker's traceback.
    """

    #: the :mod:`multiprocessing` start method of the workers
    start_method = "spawn"

    def launcher_environment(self) -> ClusterEnvironment | None:
        """``None``: this strategy starts its own processes; any launcher environment is not its to join."""
        return None

    def validate(self) -> list[str]:
        if self.num_nodes != 1:
            return [
                f"strategy {self.name or 'ddp_spawn'!r} starts processes on this machine only; for "
                f"num_nodes={self.num_nodes} start every node with torchrun and use strategy='ddp'."
            ]
        return []

    @property
    def global_rank(self) -> int:
        return self._local_rank

    def create_launcher(self) -> Launcher:
        """One worker per local device."""
        from accelkit.strategies.launchers.spawn import SpawnLauncher

        return SpawnLauncher(len(self.devices), self.start_method)


class DDPForkStrategy(DDPSpawnStrategy):
    """:class:`DDPSpawnStrategy` whose workers are forked from the calling process (Lightning's ``ddp_fork`` and
    ``ddp_notebook``). The run (trainer, module, data, the stage's function) is pickled once in the caller and each
    worker unpickles its own copy, as under ``ddp_spawn``; but the classes and functions the pickle names are found
    in the worker's forked copy of the caller's modules, so nothing is imported again: it works from a notebook or
    an interactive session, where a class defined in ``__main__`` cannot be imported by a spawned worker, and each
    worker starts in a fraction of a second. What does not pickle (a lambda or a class defined inside a function,
    held by the module or the data) is an error naming it, as under ``ddp_spawn`` (Lightning's ``ddp_fork`` hands
    its workers the objects through the fork itself, unpickled). As with Lightning, the calling process must not
    have started what a fork cannot copy (an accelerator's context, for one: such plugins do not offer it);
    threads of the caller do not exist in the workers.
    """

    start_method = "fork"
    _one_thread = False  # the workers run one intra-op thread (the caller's thread pool is up: see launch)

    def launch(self, function: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """Fork the workers. When the calling process already runs torch's intra-op thread pool (a parallel tensor
        operation ran in it, as in a notebook's earlier cells) and the workers would run more than one thread,
        each runs one, with a warning: a forked child hangs in its first parallel operation otherwise (OpenMP is
        not fork-safe; torch's DataLoader workers run one thread for the same reason)."""
        from accelkit.strategies.launchers.spawn import intra_op_pool_started, worker_threads

        threads = worker_threads(len(self.devices))
        self._one_thread = self._spawns and threads > 1 and intra_op_pool_started()
        if self._one_thread:
            warnings.warn(f"strategy={self.name or 'ddp_fork'!r}: this process already runs torch's intra-op thread "
                          f"pool (a parallel tensor operation ran in it), so each forked worker runs 1 intra-op "
                          f"thread instead of {threads}: with more, a forked worker hangs in its first parallel "
                          "operation (OpenMP is not fork-safe). For more threads per worker use "
                          "strategy='ddp_spawn', or fit before running tensor work in this process.",
                          UserWarning, stacklevel=2)
        return super().launch(function, *args, **kwargs)

    def worker_init(self, index: int) -> None:
        super().worker_init(index)
        if self._one_thread:
            torch.set_num_threads(1)
