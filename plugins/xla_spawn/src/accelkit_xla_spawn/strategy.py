"""Strategies for XLA devices: one core (``xla_single``) or one replica per core (``xla_spawn``).

torch_xla is imported only inside methods that run in a replica (or, for the launcher, at the moment of
spawning). Nothing here touches the XLA runtime in the parent process."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import torch

from accelkit.checkpoint import files as ckpt
from accelkit.errors import ConfigurationError
from accelkit.strategies import ParallelStrategy, SingleDeviceStrategy, Strategy
from accelkit_xla_spawn.removed_api import add_removed_api_hint
from accelkit_xla_spawn.runtime import RUNTIME_TOUCHED_MESSAGE, PodPlan, pod_plan, xla_runtime_initialized

_REDUCE_TYPES = {"sum": "sum", "mean": "sum", "max": "max", "min": "min"}


# --------------------------------------------------------------------------------------------- shared base
class XLAStrategy(Strategy):
    """Public base of the XLA strategies: what every strategy driving torch_xla shares.

    * :meth:`setup_environment` makes Lightning-era code run: the torch_xla 1.x names the TPU guides call
      (``xm.xrt_world_size()``, ``xm.get_ordinal()``) answer with one warning each
      (``legacy_names``), and backward passes work in a process that ran a CPU backward
      pass before torch_xla was imported (``autograd_threads``);
    * :meth:`process_dataloader` wraps loaders in a :class:`~accelkit_xla_spawn.device_loader.DeviceLoader`
      (torch_xla's background host-to-device copies, one graph cut per batch; its threads stop when the loop
      ends);
    * :meth:`step_end` cuts the lazy graph after every optimizer step, so each step is the same graph;
    * :meth:`save_checkpoint` materialises the tensors, moves them to the CPU and writes one file atomically;
    * :meth:`teardown` stops the loaders' threads, runs what is still pending on the device and undoes
      :meth:`setup_environment`.

    ``xla_single``, ``xla_spawn`` and other plugins' XLA strategies (``xla_spmd`` in accelkit-xla-spmd) build on
    it; a subclass states its topology and how it places the module and the batches. torch_xla is imported only
    inside these methods, which run in a worker, never when the class is imported.
    """

    #: what :meth:`setup_environment` and :meth:`device_loader` set up in a worker and :meth:`teardown` undoes
    _WORKER_STATE = ("_device_loaders", "_autograd_setting", "_legacy_names_installed")

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in self._WORKER_STATE:  # never travels to another process
            state.pop(key, None)
        return state

    def _xla(self) -> Any:
        import torch_xla

        return torch_xla

    def setup_environment(self) -> None:
        """Claim the device, then (in this worker, until :meth:`teardown`) answer the torch_xla 1.x names the
        TPU guides use and make sure backward passes on the device work in this process."""
        super().setup_environment()
        from accelkit_xla_spawn import legacy_names
        from accelkit_xla_spawn.autograd_threads import autograd_for_xla

        legacy_names.install()
        self._legacy_names_installed = True
        self._autograd_setting = autograd_for_xla(self.root_device)

    def device_loader(self, dataloader: Any, **parallel_loader_options: Any) -> Any:
        """A :class:`~accelkit_xla_spawn.device_loader.DeviceLoader` of ``dataloader`` on ``root_device``
        that :meth:`teardown` closes; ``parallel_loader_options`` go to torch_xla's ``ParallelLoader`` (an SPMD
        strategy passes ``input_sharding``)."""
        from accelkit_xla_spawn.device_loader import DeviceLoader

        loader = DeviceLoader(dataloader, self.root_device, **parallel_loader_options)
        self.__dict__.setdefault("_device_loaders", []).append(loader)
        return loader

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """Wrap the (already sharded) loader in a :meth:`device_loader`.

        It copies batches to the device in a background thread; tensors move, other objects in a batch pass
        through untouched. The loader also cuts the graph once per batch, so evaluation loops do not build
        one ever-growing graph. A loader that is already torch_xla's ``MpDeviceLoader`` is used as given.
        """
        import torch_xla.distributed.parallel_loader as pl

        if isinstance(dataloader, pl.MpDeviceLoader):
            return dataloader
        return self.device_loader(dataloader)

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
        """Stop the upload threads of every loader still open, run what is still pending on the device, restore
        autograd's setting and remove the torch_xla 1.x stand-ins :meth:`setup_environment` added."""
        try:
            for loader in self.__dict__.pop("_device_loaders", []):
                loader.close()
            if xla_runtime_initialized():
                self._xla().sync()
        finally:
            setting = self.__dict__.pop("_autograd_setting", None)
            if setting is not None:
                setting.close()
            if self.__dict__.pop("_legacy_names_installed", False):
                from accelkit_xla_spawn import legacy_names

                legacy_names.uninstall()
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
class XLASpawnStrategy(XLAStrategy, ParallelStrategy):
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
