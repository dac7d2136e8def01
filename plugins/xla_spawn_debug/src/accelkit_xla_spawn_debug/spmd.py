"""``strategy="xla_spmd_debug"``: ``xla_spmd`` (accelkit-xla-spmd) with torch_xla's debug output and the report.

One process drives every device of the host, so there is one report per host (``<stage>-rank<host>.txt``); its
counters are those of the whole mesh's program. Needs accelkit-xla-spmd installed (the record is registered only
then).
"""

from __future__ import annotations

from accelkit_xla_spawn_debug.strategy import XLADebugMixin
from accelkit_xla_spmd import XLASPMDStrategy


class XLASPMDDebugStrategy(XLADebugMixin, XLASPMDStrategy):
    """:class:`~accelkit_xla_spmd.XLASPMDStrategy` with the debug behaviour of ``XLADebugMixin``; accepts the
    options of both (``mesh_shape``, ``fsdp_axis`` ... and ``output_dir``, ``warmup_steps`` ...)."""
