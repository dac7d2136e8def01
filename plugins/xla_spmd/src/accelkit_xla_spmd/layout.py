"""The pure part of ``xla_spmd``: the mesh it asks for, where the batch and the parameters go on it, and how many
hosts take part. Nothing here imports torch_xla, so every rule is testable with plain values and env dicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the options :class:`~accelkit_xla_spmd.XLASPMDStrategy` accepts
ACCEPTED_OPTIONS = ("mesh_shape", "axis_names", "data_axis", "fsdp_axis")

#: a partition spec as torch_xla's ``mark_sharding`` takes it: per tensor dimension, a mesh axis name, a tuple
#: of names (the dimension split over several axes), or ``None`` (not split)
PartitionSpec = tuple[Any, ...]


@dataclass(frozen=True)
class MeshLayout:
    """The device mesh and the roles of its axes.

    :param mesh_shape: devices along each axis, across every host (``None``: decided when the device count is
        known: every device on the data axis, or on the FSDP axis when ``fsdp_axis`` is set).
    :param axis_names: one name per axis (``None``: ``("data",)`` for one axis, ``("data", "fsdp")`` for two).
    :param data_axis: the axis the batch is split on.
    :param fsdp_axis: the axis parameters are split on (FSDP-style), or ``None`` to replicate them.
    """

    mesh_shape: tuple[int, ...] | None = None
    axis_names: tuple[str, ...] | None = None
    data_axis: str = "data"
    fsdp_axis: str | None = None

    @classmethod
    def from_options(cls, mesh_shape: Any = None, axis_names: Any = None, data_axis: Any = "data",
                     fsdp_axis: Any = None) -> MeshLayout:
        """Check the user's values (each error names the bad value and what works)."""
        shape = None
        if mesh_shape is not None:
            if isinstance(mesh_shape, int) and not isinstance(mesh_shape, bool):
                mesh_shape = (mesh_shape,)
            if (not isinstance(mesh_shape, (tuple, list)) or not mesh_shape
                    or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in mesh_shape)):
                raise ValueError(f"mesh_shape={mesh_shape!r} must be a tuple of positive ints, one per mesh axis "
                                 "(for example (4,) or (2, 2)), or None for every device on the data axis.")
            shape = tuple(mesh_shape)
        names = None
        if axis_names is not None:
            if isinstance(axis_names, str):
                axis_names = (axis_names,)
            if (not isinstance(axis_names, (tuple, list)) or not axis_names
                    or not all(isinstance(n, str) and n for n in axis_names)):
                raise ValueError(f"axis_names={axis_names!r} must be a tuple of non-empty strings, one per mesh axis "
                                 "(for example ('data',) or ('data', 'fsdp')).")
            if len(set(axis_names)) != len(axis_names):
                raise ValueError(f"axis_names={tuple(axis_names)!r} names an axis twice; give each axis its own name.")
            names = tuple(axis_names)
        if shape is not None and names is None:
            if len(shape) > 2:
                raise ValueError(f"mesh_shape={shape!r} has {len(shape)} axes: name them with axis_names=(...) "
                                 "(only one axis ('data',) and two axes ('data', 'fsdp') have default names).")
            names = ("data",) if len(shape) == 1 else ("data", "fsdp")
        if shape is not None and names is not None and len(shape) != len(names):
            raise ValueError(f"mesh_shape={shape!r} has {len(shape)} axes but axis_names={names!r} names "
                             f"{len(names)}; give one name per axis.")
        if shape is None and names is not None and len(names) > 2:
            raise ValueError(f"axis_names={names!r} names {len(names)} axes: give mesh_shape=(...) too (a mesh of "
                             "more than two axes has no default shape).")
        if not isinstance(data_axis, str) or not data_axis:
            raise ValueError(f"data_axis={data_axis!r} must be the name of a mesh axis (default 'data').")
        if fsdp_axis is not None and (not isinstance(fsdp_axis, str) or not fsdp_axis):
            raise ValueError(f"fsdp_axis={fsdp_axis!r} must be the name of a mesh axis, or None to replicate the "
                             "parameters.")
        if fsdp_axis is not None and fsdp_axis == data_axis:
            raise ValueError(f"fsdp_axis={fsdp_axis!r} is also the data_axis; name two different axes (e.g. "
                             "data_axis='data', fsdp_axis='fsdp'), or set only data_axis.")
        layout = cls(shape, names, data_axis, fsdp_axis)
        for option, axis in (("data_axis", data_axis), ("fsdp_axis", fsdp_axis)):
            if axis is not None and axis not in layout.names:
                raise ValueError(f"{option}={axis!r} is not an axis of the mesh; its axes are {list(layout.names)}.")
        return layout

    # ----------------------------------------------------------------- resolved against the device count
    @property
    def names(self) -> tuple[str, ...]:
        """The axis names: as given, or ``("data",)``/``("data", "fsdp")`` for a one/two-axis ``mesh_shape``, or
        the data axis (and the FSDP axis, when set) when neither is given."""
        if self.axis_names is not None:
            return self.axis_names
        if self.mesh_shape is not None:
            return ("data",) if len(self.mesh_shape) == 1 else ("data", "fsdp")
        return (self.data_axis,) if self.fsdp_axis is None else (self.data_axis, self.fsdp_axis)

    def shape_for(self, num_devices: int) -> tuple[int, ...]:
        """The mesh shape over ``num_devices`` devices: ``mesh_shape`` when given, otherwise every device on the
        FSDP axis when parameters are sharded, else on the data axis (1 on any other axis)."""
        if self.mesh_shape is not None:
            return self.mesh_shape
        target = self.fsdp_axis if self.fsdp_axis is not None else self.data_axis
        return tuple(num_devices if name == target else 1 for name in self.names)

    def problems(self, num_devices: int) -> list[str]:
        """What is wrong with this mesh over ``num_devices`` devices (all hosts together)."""
        shape = self.shape_for(num_devices)
        names = self.names
        problems = []
        if math.prod(shape) != num_devices:
            problems.append(f"mesh_shape={shape!r} holds {math.prod(shape)} devices but this run has {num_devices} "
                            f"XLA device(s) (all hosts together); make the product of mesh_shape {num_devices}, "
                            f"e.g. mesh_shape=({num_devices},).")
        for option, axis in (("data_axis", self.data_axis), ("fsdp_axis", self.fsdp_axis)):
            if axis is not None and axis not in names:
                problems.append(f"{option}={axis!r} is not an axis of the mesh; its axes are {list(names)}.")
        return problems

    def axis_size(self, axis: str | None, num_devices: int) -> int:
        """Devices along ``axis`` (1 for ``None``)."""
        if axis is None:
            return 1
        return dict(zip(self.names, self.shape_for(num_devices), strict=True)).get(axis, 1)

    def batch_axes(self) -> Any:
        """The mesh axes the batch's first dimension is split over: the data axis, plus the FSDP axis when
        parameters are sharded (FSDP is data parallel across its shards)."""
        return self.data_axis if self.fsdp_axis is None else (self.data_axis, self.fsdp_axis)

    def batch_partition(self, ndim: int) -> PartitionSpec:
        """The partition spec of a batch tensor of ``ndim`` dimensions: the first split over :meth:`batch_axes`,
        the others whole (a 0-d tensor is replicated)."""
        if ndim == 0:
            return ()
        return (self.batch_axes(),) + (None,) * (ndim - 1)

    def param_partition(self, shape: Sequence[int], num_devices: int) -> PartitionSpec | None:
        """Where a parameter of ``shape`` is split, FSDP-style: its largest dimension that the FSDP axis divides
        (the first of equals) goes on that axis. ``None``: replicated (no FSDP axis, or no dimension divides)."""
        if self.fsdp_axis is None:
            return None
        size = self.axis_size(self.fsdp_axis, num_devices)
        candidates = [d for d in range(len(shape)) if shape[d] % size == 0 and shape[d] >= size]
        if size <= 1 or not candidates:
            return None
        dim = max(candidates, key=lambda d: (shape[d], -d))
        return tuple(self.fsdp_axis if d == dim else None for d in range(len(shape)))


# --------------------------------------------------------------------------------------------- hosts
@dataclass(frozen=True)
class HostPlan:
    """Where this process sits in a multi-host (pod) run: one ``xla_spmd`` process per host.

    :param host_index: this host's index (``TPU_WORKER_ID``/``CLOUD_TPU_TASK_ID``; 0 on one host).
    :param num_hosts: hosts taking part (entries of ``TPU_WORKER_HOSTNAMES``; 1 when unset).
    :param local_devices: XLA devices on this host.
    """

    host_index: int
    num_hosts: int
    local_devices: int

    @property
    def global_devices(self) -> int:
        """Devices across all hosts: what the mesh spans."""
        return self.num_hosts * self.local_devices

    @property
    def data_parallel_size(self) -> int:
        """Parts the data is split into by the sampler: one per host (each host's batch is then split over its
        devices by the mesh)."""
        return self.num_hosts

    @property
    def data_parallel_rank(self) -> int:
        """Which part this host reads."""
        return self.host_index


def host_plan(env: Mapping[str, str], local_devices: int) -> HostPlan:
    """This host's place in a pod, from ``env`` (pure; the same variables ``xla_spawn`` reads)."""
    from accelkit_xla_spawn.runtime import pod_plan

    plan = pod_plan(env, local_devices)
    return HostPlan(host_index=plan.host_index, num_hosts=plan.num_hosts, local_devices=local_devices)
