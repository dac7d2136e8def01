"""Strategies: how one run is laid out over devices and processes.

The classes here are device-neutral: they talk to the device only through the
:class:`~accelkit.Accelerator` they are given (its ``distributed_backend``, ``device()``, ``setup_device()``).
Plugins register them under names for their accelerators, or subclass them.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from accelkit import checkpoint as ckpt
from accelkit.errors import ConfigurationError, WorkerError
from accelkit.utils import move_to_device


_NULL_CONTEXT = contextlib.nullcontext()


class Strategy:
    """Base class: how the module, the data and the optimizer are laid out, and how processes talk.

    A strategy is configured in the parent process (:meth:`connect`), then :meth:`launch` runs the Trainer's
    work in every worker (in place, for single-process strategies). Inside a worker the Trainer calls
    :meth:`setup_environment`, :meth:`setup_module`, :meth:`batch_to_device`, :meth:`backward`,
    :meth:`optimizer_step`, :meth:`step_end`, the collectives, and finally :meth:`teardown`.

    :param options: strategy options (from the record or the user).
    """

    #: canonical name, filled in from the record that chose this class
    name: str = ""
    #: ``True`` when :meth:`launch` starts worker processes/replicas of its own; the Trainer then sends the
    #: trained weights and results back to the caller's objects.
    launches_workers: bool = False

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.accelerator: Any = None
        self.precision: Any = None
        self.devices: list[int] = [0]
        self.num_nodes = 1
        self._local_rank = 0
        self._node_rank = 0

    # ----------------------------------------------------------------- composition (parent)
    def connect(self, accelerator: Any, devices: list[int], num_nodes: int, precision: Any) -> None:
        """Receive the resolved accelerator, device indices, node count and precision."""
        self.accelerator = accelerator
        self.devices = list(devices)
        self.num_nodes = num_nodes
        self.precision = precision

    def validate(self) -> list[str]:
        """Problems with this composition (each a sentence naming the value and what works)."""
        return []

    # ----------------------------------------------------------------- topology
    @property
    def world_size(self) -> int:
        """Number of processes/replicas taking part, across nodes."""
        return len(self.devices) * self.num_nodes

    @property
    def local_rank(self) -> int:
        """Index of this process among those on its node."""
        return self._local_rank

    @property
    def node_rank(self) -> int:
        """Index of this node."""
        return self._node_rank

    @property
    def global_rank(self) -> int:
        """Index of this process among all."""
        return self._node_rank * len(self.devices) + self._local_rank

    @property
    def is_global_zero(self) -> bool:
        """Whether this is the process that writes files and prints."""
        return self.global_rank == 0

    @property
    def root_device(self) -> torch.device:
        """The device this process computes on (computed once per local rank)."""
        rank = self.local_rank
        cached = self.__dict__.get("_root_device")
        if cached is None or cached[0] != rank:
            cached = self.__dict__["_root_device"] = (rank, self.accelerator.device(self.devices[rank]))
        return cached[1]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """``num_replicas``/``rank`` for the data sampler, or ``None`` when every process reads all data."""
        if self.world_size <= 1:
            return None
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    # ----------------------------------------------------------------- lifecycle
    #: the stage being launched (``"fit"``, ``"validate"``, ``"test"``, ``"predict"``), set by the Trainer
    #: right before :meth:`launch`
    stage: str | None = None
    #: the Trainer's ``default_root_dir`` for the run being launched (a place for a strategy's own files)
    root_dir: Path | None = None

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function`` in every worker and return the global-zero worker's result
        (a :class:`~accelkit.result.WorkerResult` for the Trainer's work)."""
        return function(*args, **kwargs)

    def setup_environment(self) -> None:
        """Prepare this process: claim the device, join the process group."""
        self.accelerator.setup_device(self.root_device)

    def module_to_device(self, module: nn.Module) -> nn.Module:
        """Move ``module`` to :attr:`root_device`, then run its ``on_post_move_to_device`` hook.

        Weights tied before the move stay tied: a move to a device whose tensors cannot share storage with
        the CPU's replaces every parameter object, so the ties found before the move are re-made after it.
        If the hook then changes the number of distinct parameters, a warning says so.
        """
        before = len(list(module.parameters()))
        ties = _tied_parameter_names(module)
        module.to(self.root_device)
        for names in ties:
            shared = module.get_parameter(names[0])
            for name in names[1:]:
                owner, _, attribute = name.rpartition(".")
                setattr(module.get_submodule(owner), attribute, shared)
        hook = getattr(module, "on_post_move_to_device", None)
        if callable(hook):
            hook()
        after = len(list(module.parameters()))
        if before != after:
            warnings.warn(
                f"The model had {before} distinct parameters before the move to {self.root_device} and {after} "
                "after it: weights that were tied are no longer shared. Tie them again in the module's "
                "`on_post_move_to_device` hook.",
                UserWarning,
                stacklevel=2,
            )
        return module

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Move and convert ``module``; return the object the Trainer calls (a wrapper, for DDP)."""
        module = self.module_to_device(module)
        return self.precision.convert_module(module)

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The user's module inside whatever :meth:`setup_module` returned."""
        while isinstance(model, (nn.parallel.DistributedDataParallel, StepRouter)):
            model = model.module
        return model

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Prepare an optimizer created for the moved module."""
        return optimizer

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """Wrap a DataLoader for this device (a prefetching device loader, say). Identity by default."""
        return dataloader

    def batch_to_device(self, batch: Any) -> Any:
        """Move a batch to :attr:`root_device`; non-tensor items pass through unchanged."""
        device = self.root_device
        return move_to_device(batch, device, non_blocking=bool(self.accelerator.pin_memory))

    def backward(self, loss: torch.Tensor) -> None:
        """Back-propagate (through the precision, which may scale the loss)."""
        self.precision.backward(loss)

    def pre_manual_backward(self, model: nn.Module, loss: torch.Tensor) -> None:
        """Called before each backward pass of manual optimization (``self.manual_backward``), which runs inside
        the step's forward pass; a wrapper that syncs gradients during backward gets ready for it here."""

    def sync_buffers(self, model: nn.Module) -> None:
        """Before a manual-optimization step (which does not run inside the wrapper's forward): make the
        module's buffers agree across processes as the wrapper's forward would have."""

    def reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Average gradients across replicas before the optimizer step (DDP does this during backward)."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Step the optimizer; ``False`` if the precision skipped the step. Gradients are already reduced."""
        return self.precision.optimizer_step(optimizer)

    def step_end(self) -> None:
        """Called after every optimizer step (a lazy device cuts its graph here)."""

    def no_backward_sync(self, model: nn.Module, enabled: bool) -> Any:
        """Skip gradient synchronisation inside this context (used while accumulating gradients); a null
        context where there is nothing to skip."""
        return _NULL_CONTEXT

    # ----------------------------------------------------------------- collectives
    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Reduce ``value`` across processes (``"mean"``, ``"sum"``, ``"max"``, ``"min"``)."""
        return value

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Gather ``tensor`` from every process along a new first dimension."""
        return tensor.unsqueeze(0)

    def barrier(self, name: str | None = None) -> None:
        """Wait until every process gets here."""

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send a picklable object from ``src`` to every process."""
        return obj

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
        """Write ``checkpoint`` atomically, from the global-zero process only; every process waits for it."""
        if self.is_global_zero:
            ckpt.atomic_save(ckpt.to_cpu(checkpoint), path)
        self.barrier("save_checkpoint")

    def load_checkpoint(self, path: str | os.PathLike, weights_only: bool = True) -> dict[str, Any]:
        """Read a checkpoint onto the CPU."""
        return ckpt.load(path, weights_only=weights_only)

    def teardown(self) -> None:
        """Undo :meth:`setup_environment`."""
        self.accelerator.teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, devices={self.devices}, num_nodes={self.num_nodes})"


def _tied_parameter_names(module: nn.Module) -> list[list[str]]:
    """Groups of parameter names that refer to one shared parameter object (only groups of two or more)."""
    groups: dict[int, list[str]] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


class StepRouter(nn.Module):
    """Routes ``router("training_step", batch, idx)`` to the module's method through ``forward``.

    A wrapper such as DistributedDataParallel only sees work done through its ``forward``; wrapping this
    router (rather than the module) lets the Trainer call ``training_step`` while ``self(x)`` inside it still
    means the user's ``forward``.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.module, method)(*args, **kwargs)


class SingleDeviceStrategy(Strategy):
    """One process, one device."""

    def validate(self) -> list[str]:
        if self.world_size != 1:
            return [
                f"strategy {self.name or 'single_device'!r} runs on one device, but devices={self.devices} and "
                f"num_nodes={self.num_nodes} ask for {self.world_size}; use devices=1 or a distributed strategy."
            ]
        return []


_REDUCE_OPS = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}


class DDPStrategy(Strategy):
    """Data parallel over ``torch.distributed``: one process per device, gradients all-reduced in backward.

    This class joins processes that something else started (``torchrun``, SLURM's ``srun``): it reads
    ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` from the environment.
    Options not consumed here (``find_unused_parameters``, ``static_graph``, ...) go to
    :class:`torch.nn.parallel.DistributedDataParallel`.
    """

    _DDP_OPTIONS = ("find_unused_parameters", "static_graph", "gradient_as_bucket_view", "broadcast_buffers",
                    "bucket_cap_mb")

    def __init__(self, timeout_s: float = 1800.0, **options: Any) -> None:
        unknown = sorted(set(options) - set(self._DDP_OPTIONS))
        if unknown:
            raise ConfigurationError(
                f"unknown DDP option(s) {unknown}; DistributedDataParallel options accepted: {list(self._DDP_OPTIONS)}"
            )
        super().__init__(**options)
        self.timeout_s = timeout_s

    # environment of an external launcher
    def _env(self) -> dict[str, int] | None:
        env = os.environ
        if "RANK" in env and "WORLD_SIZE" in env and "LOCAL_RANK" in env:  # torchrun / torch.distributed.run
            return {"rank": int(env["RANK"]), "local_rank": int(env["LOCAL_RANK"]), "world_size": int(env["WORLD_SIZE"])}
        if "SLURM_PROCID" in env and "SLURM_NTASKS" in env and env.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
            return {"rank": int(env["SLURM_PROCID"]), "local_rank": int(env.get("SLURM_LOCALID", 0)),
                    "world_size": int(env["SLURM_NTASKS"])}
        return None

    def validate(self) -> list[str]:
        env = self._env()
        if env is None:
            if self.world_size == 1:
                return []
            return [
                f"strategy {self.name or 'ddp'!r} joins processes started by a launcher, but RANK/WORLD_SIZE/"
                f"LOCAL_RANK are not set: start the script with `torchrun --nproc-per-node {len(self.devices)} "
                f"--nnodes {self.num_nodes} ...` (or srun), or use strategy='ddp_spawn' to let accelkit start "
                "the processes."
            ]
        if env["world_size"] != self.world_size:
            return [
                f"the launcher started {env['world_size']} processes (WORLD_SIZE) but devices={self.devices} x "
                f"num_nodes={self.num_nodes} = {self.world_size}; make them agree (torchrun --nproc-per-node must "
                "equal devices, --nnodes must equal num_nodes)."
            ]
        return []

    def connect(self, accelerator: Any, devices: list[int], num_nodes: int, precision: Any) -> None:
        super().connect(accelerator, devices, num_nodes, precision)
        env = self._env()
        if env is not None:
            self._local_rank = env["local_rank"]
            self._node_rank = env["rank"] // max(len(self.devices), 1)

    @property
    def global_rank(self) -> int:
        env = self._env()
        return env["rank"] if env is not None else super().global_rank

    def _init_process_group(self) -> None:
        self._owns_process_group = False
        if dist.is_available() and not dist.is_initialized() and self.world_size > 1:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", "29500")
            from datetime import timedelta

            dist.init_process_group(
                backend=self.accelerator.distributed_backend,
                rank=self.global_rank,
                world_size=self.world_size,
                timeout=timedelta(seconds=self.timeout_s),
            )
            self._owns_process_group = True

    def setup_environment(self) -> None:
        super().setup_environment()
        self._init_process_group()

    def setup_module(self, module: nn.Module) -> nn.Module:
        module = super().setup_module(module)
        if self.world_size == 1:
            return module
        device_ids = self.accelerator.ddp_device_ids(self.root_device) if hasattr(
            self.accelerator, "ddp_device_ids") else None
        return nn.parallel.DistributedDataParallel(StepRouter(module), device_ids=device_ids, **self.options)

    def no_backward_sync(self, model: nn.Module, enabled: bool) -> Any:
        if enabled and isinstance(model, nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return _NULL_CONTEXT

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
        if isinstance(model, nn.parallel.DistributedDataParallel) and model.broadcast_buffers:
            for buffer in model.module.buffers():
                dist.broadcast(buffer, src=0)

    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        if not dist.is_initialized():
            return value
        if op not in _REDUCE_OPS:
            raise ValueError(f"reduce op {op!r} is not one of {sorted(_REDUCE_OPS)}")
        value = value.detach().clone()
        dist.all_reduce(value, op=getattr(dist.ReduceOp, _REDUCE_OPS[op]))
        return value / self.world_size if op == "mean" else value

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        if not dist.is_initialized():
            return tensor.unsqueeze(0)
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor.contiguous())
        return torch.stack(out)

    def barrier(self, name: str | None = None) -> None:
        if dist.is_initialized():
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not dist.is_initialized():
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def teardown(self) -> None:
        """Destroy the process group if this strategy created it (a group the user made stays)."""
        if getattr(self, "_owns_process_group", False) and dist.is_initialized():
            dist.destroy_process_group()
            self._owns_process_group = False
        super().teardown()


def find_free_port() -> int:
    """A TCP port on the loopback interface that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DDPSpawnStrategy(DDPStrategy):
    """Data parallel where accelkit starts one process per local device itself (``torch.multiprocessing``,
    start method ``spawn``).

    The worker of rank 0 sends its results and trained weights back, and the Trainer loads them into the
    caller's module. If a worker dies, the others are stopped and a :class:`~accelkit.errors.WorkerError`
    carries the failed worker's traceback.
    """

    launches_workers = True

    def _env(self) -> dict[str, int] | None:
        return None  # this strategy owns its processes; any launcher environment is not ours

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

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        import torch.multiprocessing as mp

        port = find_free_port()
        # Plain pickle, not torch.multiprocessing's: that one moves every tensor (the caller's module included)
        # into shared memory, so all workers would step the same parameters and each update would land
        # world_size times. Each worker must get its own copy.
        payload = pickle.dumps((self, function, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        with tempfile.TemporaryDirectory(prefix="accelkit-spawn-") as tmp:
            result_path = Path(tmp) / "rank0.pt"
            try:
                mp.start_processes(
                    _spawned_worker,
                    args=(payload, port, str(result_path)),
                    nprocs=len(self.devices),
                    join=True,
                    start_method="spawn",
                )
            except mp.ProcessRaisedException as exc:
                raise WorkerError(f"a worker process of strategy {self.name!r} failed; its traceback:\n{exc}") from None
            except mp.ProcessExitedException as exc:
                raise WorkerError(
                    f"a worker process of strategy {self.name!r} died ({exc}); the other workers were stopped."
                ) from None
            return torch.load(result_path, weights_only=False)


def _spawned_worker(index: int, payload: bytes, port: int, result_path: str) -> None:
    strategy, function, args, kwargs = pickle.loads(payload)
    if "OMP_NUM_THREADS" not in os.environ:
        # N workers each running as many intra-op threads as there are cores oversubscribe the host; while
        # one waits in a collective its threads spin and starve the others (40x slower steps seen with gloo
        # on 2 cores). Share the cores out, as torchrun does by setting OMP_NUM_THREADS.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, len(strategy.devices))))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(index)
    os.environ["WORLD_SIZE"] = str(len(strategy.devices))
    strategy._local_rank = index
    result = function(*args, **kwargs)
    if index == 0:
        ckpt.atomic_save(result, result_path)
