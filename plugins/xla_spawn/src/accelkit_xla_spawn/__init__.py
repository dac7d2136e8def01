"""accelkit-xla-spawn: TPUs (and other PJRT devices) through torch_xla.

Importing this package is cheap: it never imports ``torch_xla``. The strategies import it inside the
methods that run in the replicas.

:class:`XLAStrategy` is the public base of XLA strategies (device loader, graph cut per step, CPU
checkpoints): other plugins' XLA strategies subclass it.
"""

from accelkit_xla_spawn.__about__ import __version__
from accelkit_xla_spawn.accelerator import XLAAccelerator
from accelkit_xla_spawn.device_loader import DeviceLoader
from accelkit_xla_spawn.launcher import XLALauncher
from accelkit_xla_spawn.legacy_names import TorchXLALegacyNameWarning
from accelkit_xla_spawn.removed_api import REPLACEMENTS, add_removed_api_hint, removed_api_hint
from accelkit_xla_spawn.strategy import XLAStrategy

__all__ = ["DeviceLoader", "REPLACEMENTS", "TorchXLALegacyNameWarning", "XLAAccelerator", "XLALauncher", "XLAStrategy",
           "__version__", "add_removed_api_hint", "removed_api_hint"]
