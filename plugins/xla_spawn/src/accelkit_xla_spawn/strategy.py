"""Strategies for XLA devices: one core (``xla_single``) or one replica per core (``xla_spawn``).

torch_xla is imported only inside methods that run in a replica (or, for the launcher, at the moment of
spawning). Nothing here touches the XLA runtime in the parent process.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass

from typing import Any, Callable, Mapping

import torch

from accelkit import checkpoint as ckpt
from accelkit.errors import ConfigurationError
from accelkit.strategy import SingleDeviceStrategy, Strategy

from accelkit_xla_spawn.removed_api import add_removed_api_hint

_REDUCE_TYPES = {"sum": "sum", "mean": "sum", "max": "max", "min": "min"}


# --------------------------------------------------------------------------------------------- parent checks
def xla_runtime_initialized() -> bool:
    """Whether this process has already started the XLA runtime.

    Answers ``False`` without importing anything when torch_xla was never imported; otherwise asks torch_xla's
    C extension, which does not start the runtime by being asked.
    """
    module = sys.modules.get("torch_xla")
    if module is None:
        return False
    xlac = getattr(module, "_XLAC", None)
    probe = getattr(xlac, "_xla_runtime_is_initialized", None)
    return bool(probe()) if callable(probe) else False


RUNTIME_TOUCHED_MESSAGE = (
    "the XLA runtime is already running in this (parent) process, so torch_xla cannot start one replica per "
    "core (older torch_xla said 'Cannot replicate if number of devices (1) is different from 8'; newer says "
    "'Runtime is already initialized'). Something used an XLA device before Trainer.fit(): a tensor created "
    "with device=torch_xla.device()/xm.xla_device(), a model moved to it, or a torch_xla.runtime query such as "
    "xr.world_size(). Move that code into the module: its methods and hooks run inside the replicas, or "
    "use devices=1 (strategy 'xla_single') which needs no spawn."
)


@dataclass(frozen=True)
class PodPlan:
    """What one host of a TPU pod computes from its environment before launching its replicas.

    :param host_index: this host's index (``TPU_WORKER_ID``, or ``CLOUD_TPU_TASK_ID``; 0 on a single host).
    :param num_hosts: hosts taking part (entries of ``TPU_WORKER_HOSTNAMES``; 1 when unset).
    :param local_world_size: replicas on this host (its local XLA devices).
    """

    host_index: int
    num_hosts: int
    local_world_size: int

    @property
    def world_size(self) -> int:
        """Replicas across all hosts."""
        return self.num_hosts * self.local_world_size

    @property
    def global_ordinals(self) -> range:
        """The global ordinals of this host's replicas (host-major, as PJRT numbers them)."""
        start = self.host_index * self.local_world_size
        return range(start, start + self.local_world_size)


def pod_plan(env: Mapping[str, str], local_devices: int) -> PodPlan:
    """Compute this host's place in a pod from ``env`` (pure: testable with a dict).

    Raises :class:`ConfigurationError` when the variables contradict each other.
    """
    hostnames = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]
    num_hosts = len(hostnames) or 1
    raw_index = env.get("TPU_WORKER_ID") or env.get("CLOUD_TPU_TASK_ID") or "0"
    try:
        host_index = int(raw_index)
    except ValueError:
        raise ConfigurationError(f"TPU_WORKER_ID={raw_index!r} is not an integer host index.") from None
    if not 0 <= host_index < num_hosts:
        raise ConfigurationError(
            f"TPU_WORKER_ID={host_index} but TPU_WORKER_HOSTNAMES lists {num_hosts} host(s) "
            f"({', '.join(hostnames) or 'none'}); the worker id must be in 0..{num_hosts - 1}."
        )
    if local_devices < 1:
        raise ConfigurationError("this host has no XLA device to run replicas on.")
    return PodPlan(host_index=host_index, num_hosts=num_hosts, local_world_size=local_devices)


CPU_COLLECTIVES_NOTE = (
    "PJRT_DEVICE=CPU with more than one replica: torch_xla 2.x on the CPU is known to abort in XLA's rendezvous "
    "on cross-replica collectives (xm.all_reduce, xm.rendezvous; pytorch/xla#5005, #9089), which this strategy "
    "needs for the gradients. Use devices=1 on the CPU, or run on a TPU."
)


def launch_failure_hint(env: Mapping[str, str], world_size: int) -> str:
    """Extra explanation for a failed launch, from the environment it ran in (empty when there is none)."""
    if env.get("PJRT_DEVICE", "").strip().upper() == "CPU" and world_size > 1:
        return " " + CPU_COLLECTIVES_NOTE
    return ""


# --------------------------------------------------------------------------------------------- shared base
class XLAStrategy(Strategy):
    """Public base of the XLA strategies: what every strategy driving torch_xla shares.

    * :meth:`process_dataloader` wraps loaders in torch_xla's ``MpDeviceLoader`` (background host-to-device
      copies, one graph cut per batch);
    * :meth:`step_end` cuts the lazy graph after every optimizer step, so each step is the same graph;
    * :meth:`save_checkpoint` materialises the tensors, moves them to the CPU and writes one file atomically;
    * :meth:`teardown` runs what is still pending on the device.

    ``xla_single``, ``xla_spawn`` and other plugins' XLA strategies (``xla_spmd`` in accelkit-xla-spmd) build on
    it; a subclass states its topology and how it places the module and the batches. torch_xla is imported only
    inside these methods, which run in a worker, never when the class is imported.
    """

    def _xla(self) -> Any:
        import torch_xla

        return torch_xla

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """Wrap the (already sharded) loader in torch_xla's ``MpDeviceLoader``.

        It copies batches to the device in a background thread; tensors move, other objects in a batch pass
        through untouched. The loader also cuts the graph once per batch, so evaluation loops do not build
        one ever-growing graph.
        """
        import torch_xla.distributed.parallel_loader as pl

        if isinstance(dataloader, pl.MpDeviceLoader):
            return dataloader
        return pl.MpDeviceLoader(dataloader, self.root_device)

    def step_end(self) -> None:
        """Cut the lazy graph after each optimizer step.

        The device loader cuts only when it fetches the next batch, which is after logging and callbacks have
        run; cutting here makes every step one and the same graph, whatever runs between steps.
        """
        self._xla().sync()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
        """Every replica materialises its tensors and moves them to the CPU; after a barrier, the replica of
        local ordinal 0 of each host writes the file atomically; everyone waits for the write.

        Called in a parent that never started the XLA runtime (a CPU model saved before ``fit``), it does not
        start one."""
        if xla_runtime_initialized():
            self._xla().sync()
        on_cpu = ckpt.to_cpu(checkpoint)
        self.barrier("checkpoint_ready")
        if self.local_rank == 0:
            ckpt.atomic_save(on_cpu, path)
        self.barrier("checkpoint_written")

    def teardown(self) -> None:
        """Run what is still pending on the device."""
        if xla_runtime_initialized():
            self._xla().sync()
        super().teardown()


#: the name this base had before it became public (kept for plugins that imported it)
_XLAStrategyBase = XLAStrategy


class XLASingleStrategy(XLAStrategy, SingleDeviceStrategy):
    """One XLA core in this process, no spawn (the ``"auto"`` strategy for ``devices=1`` or ``devices=[k]``)."""

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``function`` here; an ``AttributeError``/``ImportError`` naming a torch_xla 1.x name that 2.x
        removed (``xm.xrt_world_size``, ``xm.get_ordinal`` ...) gets its replacement added to the message."""
        try:
            return super().launch(function, *args, **kwargs)
        except (AttributeError, ImportError) as exc:
            add_removed_api_hint(exc)
            raise

    def validate(self) -> list[str]:
        """One core only: ``devices=1`` or ``devices=[k]`` on one host."""
        problems = super().validate()
        if len(self.devices) != 1:
            problems.append(f"strategy 'xla_single' runs on one core but devices={self.devices}; use devices=1 "
                            "or devices=[k], or strategy='xla_spawn' for all cores.")
        return problems


# --------------------------------------------------------------------------------------------- spawn
class XLASpawnStrategy(XLAStrategy):
    """One replica per local XLA core through ``torch_xla.launch`` (PJRT), data parallel.

    The model is replicated; after ``backward`` the gradients are averaged across replicas with torch_xla's
    cross-replica all-reduce; every replica steps its own optimizer and so stays identical. Each replica reads
    its own shard of the data. The trained weights of replica 0 come back to the caller's model.

    On a pod (several hosts) the same command runs on every host; each host launches its local replicas and
    PJRT joins them (see ``docs/tpu.rst``).
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._in_replica = False
        self._plan: PodPlan | None = None

    # ----------------------------------------------------------------- parent
    def connect(self, accelerator: Any, devices: list[int], num_nodes: int, precision: Any) -> None:
        """Take the resolved run; on a pod, adopt the host count and this host's index from the environment."""
        super().connect(accelerator, devices, num_nodes, precision)
        try:
            self._plan = pod_plan(os.environ, len(self.devices))
        except ConfigurationError:
            self._plan = None  # reported by validate()
        if self._plan is not None:
            if num_nodes == 1 and self._plan.num_hosts > 1:
                self.num_nodes = self._plan.num_hosts
            self._node_rank = self._plan.host_index

    def validate(self) -> list[str]:
        """Pod variables that contradict each other or ``num_nodes``, and a runtime already started here."""
        problems = []
        try:
            plan = pod_plan(os.environ, len(self.devices))
        except ConfigurationError as exc:
            problems.append(str(exc))
            plan = None
        if plan is not None and self.num_nodes != plan.num_hosts:
            problems.append(
                f"num_nodes={self.num_nodes} but this pod has {plan.num_hosts} host(s) (TPU_WORKER_HOSTNAMES); "
                "leave num_nodes at 1 (it is read from the pod) or make them agree."
            )
        if xla_runtime_initialized():
            problems.append(RUNTIME_TOUCHED_MESSAGE)
        return problems

    def create_launcher(self) -> Any:
        """An :class:`~accelkit_xla_spawn.launcher.XLALauncher`: one replica per local core through
        ``torch_xla.launch``."""
        from accelkit_xla_spawn.launcher import XLALauncher

        return XLALauncher()

    def worker_init(self, index: int) -> None:
        """Inside a replica: ranks come from ``torch_xla.runtime`` from now on."""
        self._in_replica = True

    # ----------------------------------------------------------------- topology
    @property
    def world_size(self) -> int:
        """Replicas across all hosts: ``torch_xla.runtime.world_size()`` inside a replica."""
        if self._in_replica:
            import torch_xla.runtime as xr

            return xr.world_size()
        return len(self.devices) * self.num_nodes

    @property
    def global_rank(self) -> int:
        """``torch_xla.runtime.global_ordinal()`` inside a replica."""
        if self._in_replica:
            import torch_xla.runtime as xr

            return xr.global_ordinal()
        return self._node_rank * len(self.devices)

    @property
    def local_rank(self) -> int:
        """``torch_xla.runtime.local_ordinal()`` inside a replica."""
        if self._in_replica:
            import torch_xla.runtime as xr

            return xr.local_ordinal()
        return 0

    @property
    def node_rank(self) -> int:
        """``torch_xla.runtime.host_index()`` inside a replica (the host's index in a pod)."""
        if self._in_replica:
            import torch_xla.runtime as xr

            return xr.host_index()
        return self._node_rank

    @property
    def root_device(self) -> torch.device:
        """This replica's XLA device."""
        return self._xla().device()

    # ----------------------------------------------------------------- gradients and collectives
    def all_reduce_(self, reduce_type: str, tensors: list[torch.Tensor], scale: float = 1.0) -> None:
        """Reduce ``tensors`` across replicas in place (``reduce_type``: ``"sum"``, ``"max"`` or ``"min"``),
        then multiply by ``scale``. Uses ``torch_xla.core.xla_model.all_reduce``."""
        import torch_xla.core.xla_model as xm

        if not tensors:
            return
        kind = {"sum": xm.REDUCE_SUM, "max": xm.REDUCE_MAX, "min": xm.REDUCE_MIN}[reduce_type]
        xm.all_reduce(kind, tensors, scale=scale)

    def reduce_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Average the gradients of ``optimizer``'s parameters across replicas, before the step.

        Parameters that appear twice (tied weights) are reduced once.
        """
        if self.world_size <= 1:
            return
        seen: set[int] = set()
        grads = []
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None and id(param) not in seen:
                    seen.add(id(param))
                    grads.append(param.grad)
        self.all_reduce_("sum", grads, scale=1.0 / self.world_size)

    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """Reduce a tensor across replicas (``"mean"``, ``"sum"``, ``"max"``, ``"min"``); returns a new tensor."""
        if op not in _REDUCE_TYPES:
            raise ValueError(f"reduce op {op!r} is not one of {sorted(_REDUCE_TYPES)}")
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value))
        value = value.detach().to(self.root_device).clone()
        if self.world_size > 1:
            self.all_reduce_(_REDUCE_TYPES[op], [value], scale=1.0 / self.world_size if op == "mean" else 1.0)
        return value

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Stack ``tensor`` from every replica along a new first dimension."""
        import torch_xla.core.xla_model as xm

        if self.world_size <= 1:
            return tensor.unsqueeze(0)
        return xm.all_gather(tensor.unsqueeze(0), dim=0)

    def barrier(self, name: str | None = None) -> None:
        """Wait for every replica (``xm.rendezvous``)."""
        import torch_xla.core.xla_model as xm

        if self._in_replica and self.world_size > 1:
            xm.rendezvous(name or "accelkit_barrier")

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send a picklable object from replica ``src`` to all (``xm.xla_rendezvous`` payloads)."""
        import torch_xla.core.xla_model as xm

        if not self._in_replica or self.world_size <= 1:
            return obj
        payload = pickle.dumps(obj) if self.global_rank == src else b""
        return pickle.loads(xm.xla_rendezvous(payload, tag="accelkit_broadcast")[src])
