"""accelkit-xla-bf16: bfloat16 precisions for the ``xla`` accelerator.

Importing this package does not import ``torch_xla``.
"""

from accelkit_xla_bf16.__about__ import __version__
from accelkit_xla_bf16.precision import LEGACY_ENV, XLALegacyBF16Precision

__all__ = ["LEGACY_ENV", "XLALegacyBF16Precision", "__version__"]
