"""How ``xla_spmd`` splits batches on the mesh (imports torch_xla: used only inside a run)."""

from __future__ import annotations

from typing import Any

import torch
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs

from accelkit.utilities import apply_to_tensors
from accelkit_xla_spmd.layout import MeshLayout


class BatchSharding(xs.ShardingSpec):
    """An ``input_sharding`` for torch_xla's device loader that fits every tensor of a batch: a tensor's first
    dimension goes on the batch axes (:meth:`MeshLayout.batch_axes`), whatever its number of dimensions (torch_xla's
    own ``ShardingSpec`` applies to tensors of one rank only and leaves the others replicated).

    :param mesh: the ``torch_xla.distributed.spmd.Mesh``.
    :param layout: the strategy's :class:`~accelkit_xla_spmd.layout.MeshLayout`.
    :param minibatch: each host holds only its part of the global batch (several hosts).
    """

    def __init__(self, mesh: Any, layout: MeshLayout, minibatch: bool = False) -> None:
        super().__init__(mesh, layout.batch_partition(1), minibatch)
        self.layout = layout
        axes = layout.batch_axes()
        axes = axes if isinstance(axes, tuple) else (axes,)
        #: the mesh has axes of size > 1 that the batch is not split on (it is replicated along them)
        self.partial = any(size > 1 and name not in axes
                           for name, size in zip(mesh.axis_names, mesh.mesh_shape, strict=True))
        self._by_rank: dict[int, xs.ShardingSpec] = {}

    def spec(self, ndim: int) -> xs.ShardingSpec:
        """torch_xla's ``ShardingSpec`` for a batch tensor of ``ndim`` dimensions."""
        found = self._by_rank.get(ndim)
        if found is None:
            found = self._by_rank[ndim] = xs.ShardingSpec(self.mesh, self.layout.batch_partition(ndim),
                                                          self.minibatch)
        return found

    def needs_annotation(self, tensor: torch.Tensor) -> bool:
        """Whether the loader copies ``tensor`` replicated and :func:`place_batch` splits it afterwards
        (torch_xla 2.9 cannot copy a 1-d tensor straight into a partially replicated sharding)."""
        return self.partial and tensor.dim() == 1

    def xla_spec(self, t: torch.Tensor) -> Any:
        """The sharding ``t`` is copied to the devices with (``None``: replicated)."""
        if t.dim() == 0 or self.needs_annotation(t):
            return None
        return self.spec(t.dim()).xla_spec(t)

    def can_apply(self, t: torch.Tensor) -> bool:
        """Every tensor with at least one dimension."""
        return t.dim() > 0


def place_batch(batch: Any, device: torch.device, sharding: BatchSharding) -> Any:
    """Copy the host tensors of ``batch`` to the mesh split by ``sharding``; split the device tensors the loader
    left replicated. Non-tensor items pass through."""

    def place(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.device.type != "xla":
            tensor = xm.send_cpu_data_to_device(tensor, device, sharding)[0]
        if sharding.needs_annotation(tensor):
            xs.mark_sharding(tensor, sharding.mesh, sharding.layout.batch_partition(tensor.dim()))
        return tensor

    return apply_to_tensors(batch, place)
