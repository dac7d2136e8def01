"""accelkit-xla-spawn-debug: the ``xla_spawn_debug`` strategy (alias ``tpu_spawn_debug``).

Importing this package does not import ``torch_xla``; the strategy classes are in
``accelkit_xla_spawn_debug.strategy``, the counter bookkeeping and diagnosis in
``accelkit_xla_spawn_debug.monitor``.
"""

from accelkit_xla_spawn_debug.__about__ import __version__

__all__ = ["__version__"]
