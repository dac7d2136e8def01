"""Entry point of accelkit-xla-bf16: the precision records it registers. Importing this module is cheap.

Names on accelerator ``xla``:

* ``bf16-true`` (alias ``bf16_true``): weights, inputs and computation in ``torch.bfloat16``
  (core :class:`~accelkit.precision.TruePrecision`).
* ``bf16-mixed`` (alias ``bf16``): float32 weights, ``torch.autocast("xla", dtype=torch.bfloat16)`` around the
  steps (core :class:`~accelkit.precision.MixedPrecision`, no gradient scaler: bfloat16 has float32's range).
* ``16-mixed`` (alias ``16``): the same as ``bf16-mixed``, with a one-line notice, because XLA devices compute
  in bfloat16 rather than float16.
* ``bf16-legacy``: the deprecated ``XLA_USE_BF16=1`` mode, only on request
  (:class:`~accelkit_xla_bf16.precision.XLALegacyBF16Precision`).

``32-true`` (the default) is registered by accelkit-xla-spawn, not here.
"""

from __future__ import annotations

from accelkit import hookimpl
from accelkit.records import PrecisionRecord

ACCELKIT_API = ">=1.0,<2"

_XLA = ("xla",)

#: printed once when ``precision=16`` / ``"16-mixed"`` is chosen on XLA
SIXTEEN_MIXED_NOTICE = (
    "precision='16-mixed' on XLA runs as bfloat16 mixed precision (bf16-mixed): XLA devices compute in "
    "bfloat16, not float16; write precision='bf16-mixed' to silence this notice."
)


@hookimpl
def accelkit_register_precisions() -> list[PrecisionRecord]:
    """The bfloat16 precisions for accelerator ``xla``."""
    return [
        PrecisionRecord("bf16-true", "accelkit.precision:TruePrecision", aliases=("bf16_true",), accelerators=_XLA,
                        options={"dtype": "bfloat16"},
                        description="weights, inputs and computation in bfloat16"),
        PrecisionRecord("bf16-mixed", "accelkit.precision:MixedPrecision", aliases=("bf16",), accelerators=_XLA,
                        options={"dtype": "bfloat16"},
                        description="float32 weights, XLA autocast to bfloat16"),
        PrecisionRecord("16-mixed", "accelkit.precision:MixedPrecision", aliases=("16",), accelerators=_XLA,
                        options={"dtype": "bfloat16"}, notice=SIXTEEN_MIXED_NOTICE,
                        description="runs as bf16-mixed on XLA (no float16 units)"),
        PrecisionRecord("bf16-legacy", "accelkit_xla_bf16.precision:XLALegacyBF16Precision", accelerators=_XLA,
                        notice="precision='bf16-legacy' sets the deprecated XLA_USE_BF16=1; prefer 'bf16-true' or "
                               "'bf16-mixed'.",
                        description="deprecated XLA_USE_BF16=1: float32 tensors stored as bfloat16 on the device"),
    ]
