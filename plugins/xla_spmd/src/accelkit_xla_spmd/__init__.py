"""accelkit-xla-spmd: ``strategy="xla_spmd"``, one process per host over every XLA device of the host.

Importing this package does not import ``torch_xla`` (the strategy imports it inside the run).
"""

from accelkit_xla_spmd.__about__ import __version__
from accelkit_xla_spmd.checkpoint import save_sharded
from accelkit_xla_spmd.layout import HostPlan, MeshLayout, host_plan
from accelkit_xla_spmd.strategy import XLASPMDStrategy

__all__ = ["HostPlan", "MeshLayout", "XLASPMDStrategy", "__version__", "host_plan",
           "save_sharded"]
