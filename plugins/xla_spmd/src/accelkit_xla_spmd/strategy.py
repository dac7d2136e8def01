"""``strategy="xla_spmd"``: one process per host drives every XLA device of that host through torch_xla's SPMD.

The module is placed once, on the SPMD virtual device, and annotated: parameters replicated (data parallel) or
split FSDP-style on a mesh axis; each batch is split on the data axis as it is copied to the devices. XLA's
GSPMD partitioner turns the one program into per-device programs and inserts the collectives (the gradient
all-reduce, FSDP's all-gathers), so the training step itself stays the ordinary single-device step.

torch_xla is imported only in :meth:`XLASPMDStrategy.setup_runtime` and the methods that run after it.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from accelkit.checkpoint import files as ckpt
from accelkit.strategies import ParallelStrategy
from accelkit_xla_spawn import XLAStrategy
from accelkit_xla_spawn.runtime import xla_runtime_initialized
from accelkit_xla_spmd.checkpoint import save_sharded
from accelkit_xla_spmd.layout import ACCEPTED_OPTIONS, HostPlan, MeshLayout, host_plan

RUNTIME_STARTED_WITHOUT_SPMD = (
    "the XLA runtime of this process was started before strategy 'xla_spmd' could switch it to SPMD mode "
    "(torch_xla.runtime.use_spmd() must run before anything uses an XLA device). Something used an XLA device "
    "before Trainer.fit(): a tensor created on torch_xla.device(), a model moved there, or a runtime query. Move "
    "that code into the module's hooks, or call torch_xla.runtime.use_spmd() first."
)


class XLASPMDStrategy(XLAStrategy, ParallelStrategy):
    """One process per host over all its XLA devices, with a device mesh (torch_xla SPMD).

    :param mesh_shape: devices along each mesh axis, across all hosts; its product must equal the number of
        devices (default: every device on one axis: the data axis, or the FSDP axis when ``fsdp_axis`` is set).
    :param axis_names: one name per mesh axis (default ``("data",)``, or ``("data", "fsdp")`` for two axes).
    :param data_axis: the axis each batch's first dimension is split on (default ``"data"``).
    :param fsdp_axis: ``None`` (default) replicates the parameters (data parallel); an axis name splits every
        parameter on that axis, FSDP-style (each parameter's largest dimension the axis size divides; others
        stay replicated). The batch is then split over the data and FSDP axes together.

    Topology (see ``docs/xla_spmd.rst``): one process per host (:attr:`processes_per_node` 1,
    :attr:`devices_per_process` the host's devices), so :attr:`world_size` and :attr:`data_parallel_size` count
    hosts. On a pod the same command runs on every host.
    """

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(ACCEPTED_OPTIONS))
        if unknown:
            raise TypeError(f"strategy 'xla_spmd' got unknown option(s) {unknown}; it accepts "
                            f"{list(ACCEPTED_OPTIONS)}.")
        self.layout = MeshLayout.from_options(**options)
        super().__init__(**options)
        self._plan: HostPlan | None = None
        self._runtime_ready = False
        self.mesh: Any = None
        #: how each parameter was split, by name (a partition spec, or ``None`` for replicated); filled when the
        #: module is placed
        self.param_partitions: dict[str, tuple[Any, ...] | None] = {}
        self._param_specs: dict[int, tuple[Any, ...]] = {}
        self._batch_sharding: Any = None

    # ----------------------------------------------------------------- composition (parent)
    def connect(self, accelerator: Any, devices: list[int], num_nodes: int, precision: Any) -> None:
        """Take the resolved run; on a pod, adopt the host count and this host's index from the environment."""
        super().connect(accelerator, devices, num_nodes, precision)
        try:
            self._plan = host_plan(os.environ, len(self.devices))
        except Exception:  # noqa: BLE001 - reported by validate()
            self._plan = None
        if self._plan is not None:
            if num_nodes == 1 and self._plan.num_hosts > 1:
                self.num_nodes = self._plan.num_hosts
            self._node_rank = self._plan.host_index

    def validate(self) -> list[str]:
        """Every local device taken, a mesh that holds exactly the run's devices, and pod variables that agree."""
        problems = []
        local = self.accelerator.device_count() if self.accelerator is not None else len(self.devices)
        if local and len(self.devices) != local:
            problems.append(f"strategy 'xla_spmd' drives every XLA device of the host as one mesh, but devices="
                            f"{self.devices} selects {len(self.devices)} of its {local}; use devices='auto' (or "
                            f"{local}), or strategy='xla_single' for one device.")
        try:
            plan = host_plan(os.environ, len(self.devices))
        except Exception as exc:  # noqa: BLE001 - a ConfigurationError naming the variables
            problems.append(str(exc))
            plan = None
        if plan is not None and self.num_nodes != plan.num_hosts:
            problems.append(f"num_nodes={self.num_nodes} but this pod has {plan.num_hosts} host(s) "
                            "(TPU_WORKER_HOSTNAMES); leave num_nodes at 1 (it is read from the pod) or make them "
                            "agree.")
        problems.extend(self.layout.problems(self.global_devices))
        return problems

    # ----------------------------------------------------------------- topology
    @property
    def processes_per_node(self) -> int:
        """One process per host."""
        return 1

    @property
    def devices_per_process(self) -> int:
        """Every device of the host."""
        return len(self.devices)

    @property
    def global_devices(self) -> int:
        """Devices the mesh spans: this host's times the number of hosts."""
        return len(self.devices) * self.num_nodes

    @property
    def world_size(self) -> int:
        """Processes across hosts: the number of hosts (1 on one host)."""
        return self.processes_per_node * self.num_nodes

    @property
    def global_rank(self) -> int:
        """This host's index (its one process)."""
        return self._node_rank

    @property
    def local_rank(self) -> int:
        """Always 0: one process per host."""
        return 0

    @property
    def data_parallel_size(self) -> int:
        """The sampler splits the data by host; each host's batch is split over its devices by the mesh."""
        return self.world_size

    @property
    def data_parallel_rank(self) -> int:
        """This host's part of the data."""
        return self.global_rank

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int] | None:
        """One part of the data per host (``None`` on one host: the mesh splits each batch itself)."""
        if self.data_parallel_size <= 1:
            return None
        return {"num_replicas": self.data_parallel_size, "rank": self.data_parallel_rank}

    @property
    def root_device(self) -> torch.device:
        """The SPMD virtual device (``xla:0``) that stands for the whole mesh."""
        self.setup_runtime()
        return self._xla().device()

    # ----------------------------------------------------------------- runtime (the worker)
    def setup_runtime(self) -> None:
        """Switch torch_xla to SPMD mode and build the mesh (first thing in the worker; runs once).

        On several hosts it also joins a CPU process group (gloo, rendezvous through ``xla://``) for
        checkpoints and for objects that differ per host."""
        if self._runtime_ready:
            return
        import numpy as np
        import torch_xla.distributed.spmd as xs
        import torch_xla.runtime as xr

        if xla_runtime_initialized() and not xr.is_spmd():
            raise RuntimeError(RUNTIME_STARTED_WITHOUT_SPMD)
        xr.use_spmd()
        count = xr.global_runtime_device_count()
        problems = self.layout.problems(count)
        if problems:
            raise RuntimeError("; ".join(problems))
        self.mesh = xs.Mesh(np.arange(count), self.layout.shape_for(count), self.layout.names)
        xs.set_global_mesh(self.mesh)
        if self.num_nodes > 1:
            import torch.distributed as dist

            if not dist.is_initialized():
                import torch_xla.distributed.xla_backend  # noqa: F401 - registers the xla:// rendezvous

                dist.init_process_group("gloo", init_method="xla://")
        self._runtime_ready = True

    def setup_environment(self) -> None:
        """Make sure the runtime is in SPMD mode (if the Trainer did not call :meth:`setup_runtime`), then claim
        the device."""
        self.setup_runtime()
        super().setup_environment()

    def setup_module(self, module: nn.Module) -> nn.Module:
        """Place the module on the mesh: move it, apply the precision, then split the parameters FSDP-style when
        ``fsdp_axis`` is set (replicated otherwise)."""
        module = super().setup_module(module)
        import torch_xla.distributed.spmd as xs

        count = self.mesh.size()
        self.param_partitions, self._param_specs = {}, {}
        for name, param in module.named_parameters():
            spec = self.layout.param_partition(tuple(param.shape), count)
            self.param_partitions[name] = spec
            if spec is not None:
                xs.mark_sharding(param, self.mesh, spec)
                self._param_specs[id(param)] = spec
        return module

    def setup_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """After a resumed optimizer state is loaded (onto replicated tensors), split each state tensor shaped
        like its parameter as the parameter is split, so the step keeps the same compiled graph."""
        if self._param_specs:
            optimizer.register_load_state_dict_post_hook(self._shard_optimizer_state)
        return optimizer

    def _shard_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        import torch_xla.distributed.spmd as xs

        for group in optimizer.param_groups:
            for param in group["params"]:
                spec = self._param_specs.get(id(param))
                for value in optimizer.state.get(param, {}).values() if spec is not None else ():
                    if isinstance(value, torch.Tensor) and value.device.type == "xla" and value.shape == param.shape:
                        xs.mark_sharding(value, self.mesh, spec)

    # ----------------------------------------------------------------- data
    def batch_sharding(self) -> Any:
        """The ``input_sharding`` given to the device loader: each tensor's first dimension on the batch axes."""
        if self._batch_sharding is None:
            from accelkit_xla_spmd.sharding import BatchSharding

            self.setup_runtime()
            self._batch_sharding = BatchSharding(self.mesh, self.layout, minibatch=self.num_nodes > 1)
        return self._batch_sharding

    def process_dataloader(self, dataloader: Any, stage: str) -> Any:
        """The base's device loader with :meth:`batch_sharding`: batches reach the devices already split (its
        upload threads stop when the loop ends)."""
        import torch_xla.distributed.parallel_loader as pl

        if isinstance(dataloader, pl.MpDeviceLoader):
            return dataloader
        return self.device_loader(dataloader, input_sharding=self.batch_sharding())

    def batch_to_device(self, batch: Any) -> Any:
        """Copy what is still on the host with the batch sharding; annotate device tensors the loader could not
        split."""
        from accelkit_xla_spmd.sharding import place_batch

        return place_batch(batch, self.root_device, self.batch_sharding())

    # ----------------------------------------------------------------- collectives
    def _dist(self) -> Any:
        import torch.distributed as dist

        return dist if self.world_size > 1 and dist.is_available() and dist.is_initialized() else None

    def reduce(self, value: torch.Tensor, op: str = "mean") -> torch.Tensor:
        """A value computed on the mesh is already global: returned as it is. On several hosts, a host tensor is
        reduced across hosts over the CPU process group."""
        if op not in ("mean", "sum", "max", "min"):
            raise ValueError(f"reduce op {op!r} is not one of ['max', 'mean', 'min', 'sum']")
        if not isinstance(value, torch.Tensor):
            value = torch.tensor(float(value))
        dist = self._dist()
        if dist is None or value.device.type == "xla":
            return value
        out = value.detach().clone()
        dist.all_reduce(out, op={"mean": dist.ReduceOp.SUM, "sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                 "min": dist.ReduceOp.MIN}[op])
        return out / self.world_size if op == "mean" else out

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """One entry per process (host) along a new first dimension."""
        dist = self._dist()
        if dist is None:
            return tensor.unsqueeze(0)
        local = tensor.detach().cpu()
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local)
        return torch.stack(parts).to(tensor.device)

    def barrier(self, name: str | None = None) -> None:
        """Wait for every host (nothing to wait for on one host)."""
        dist = self._dist()
        if dist is not None:
            dist.barrier()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send a picklable object from host ``src`` to all."""
        dist = self._dist()
        if dist is None:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    # ----------------------------------------------------------------- checkpoints
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike) -> None:
        """Write a sharded checkpoint directory at ``path`` (see ``accelkit_xla_spmd.checkpoint``): each
        shard written by the host holding it, the rest by host 0, renamed into place when complete.

        Called before the runtime started (a CPU module saved before ``fit``), it writes one file as the base
        strategy does."""
        if not xla_runtime_initialized():
            if self.is_global_zero:
                ckpt.atomic_save(ckpt.to_cpu(checkpoint), path)
            return
        self._xla().sync()
        save_sharded(checkpoint, path, is_coordinator=self.is_global_zero, barrier=self.barrier)

    # Loading: the core's load_checkpoint reads a sharded directory (whatever mesh or strategy wrote it) into CPU
    # tensors of the full shapes before the module is placed; setup_module then splits the weights on this mesh,
    # and the optimizer's load hook splits its state (see setup_optimizer).

    def optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The optimizer's state keyed by parameter name (as sharded checkpoints hold it), its tensors left on the
        mesh, split as their parameters are."""
        from accelkit.checkpoint.sharded import optimizer_state_by_name

        return optimizer_state_by_name(optimizer.state_dict(), self.unwrap(model), optimizer)

    def full_optimizer_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """``optimizer.state_dict()`` (keyed by index; its tensors are global on the mesh)."""
        return optimizer.state_dict()

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, devices={self.devices}, num_nodes={self.num_nodes}, "
                f"layout={self.layout})")
