"""The opt-in legacy bfloat16 mode of torch_xla (``XLA_USE_BF16=1``).

The supported precisions (``bf16-true``, ``bf16-mixed``) are the core's
:class:`~accelkit.precision.TruePrecision` and :class:`~accelkit.precision.MixedPrecision`; only this legacy
mode needs code of its own. This module does not import ``torch_xla``.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from accelkit.precision import Precision

#: the deprecated torch_xla environment variable the legacy mode sets
LEGACY_ENV = "XLA_USE_BF16"


class XLALegacyBF16Precision(Precision):
    """``precision="bf16-legacy"``: torch_xla's deprecated ``XLA_USE_BF16=1`` mode.

    With that variable set, every ``float32`` tensor is *stored and computed* as ``bfloat16`` on the XLA
    device while PyTorch still reports ``torch.float32`` (``.cpu()`` converts back). It is process-wide, so
    it must be set before the XLA runtime creates its first tensor: :meth:`connect` sets it in the process
    that composes the run (before any worker starts), and spawned workers inherit it.

    Prefer ``"bf16-true"`` (explicit ``bfloat16`` dtypes) or ``"bf16-mixed"`` (autocast); use this only to
    reproduce results of scripts written for the old variable.
    """

    name = "bf16-legacy"

    def connect(self, accelerator: Any) -> None:
        """Set ``XLA_USE_BF16=1`` for this process and the workers it starts."""
        super().connect(accelerator)
        previous = os.environ.get(LEGACY_ENV)
        if previous not in (None, "", "0", "1"):
            raise ValueError(f"{LEGACY_ENV}={previous!r} is set in the environment; precision 'bf16-legacy' "
                             f"sets it to '1'. Unset it or set it to 1.")
        os.environ[LEGACY_ENV] = "1"
        if "torch_xla" in sys.modules and previous != "1":
            warnings.warn(
                f"torch_xla was imported before precision 'bf16-legacy' set {LEGACY_ENV}=1: tensors this process "
                "already created on the XLA device stay float32. Spawned workers are not affected.",
                UserWarning,
                stacklevel=2,
            )
