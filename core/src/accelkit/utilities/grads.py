"""Gradient norms to log: :func:`grad_norm` (Lightning's ``lightning.pytorch.utilities.grad_norm``)."""

from __future__ import annotations

import math

import torch
from torch import nn


def _parse_norm_type(norm_type: float | int | str) -> float:
    """``norm_type`` as a positive float (``"inf"`` for the largest absolute value); anything else is refused."""
    try:
        value = float(norm_type)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(norm_type, bool) or math.isnan(value) or value <= 0:
        raise ValueError(f"grad_norm(norm_type={norm_type!r}): the norm type must be a positive number (2 for the "
                         "Euclidean norm, 1, 2.5 ...) or 'inf' for the largest absolute value")
    return value


def grad_norm(module: nn.Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, torch.Tensor]:
    """The ``norm_type``-norm of each parameter's gradient, and of all gradients together, ready for ``log_dict``.

    Typically called in ``on_before_optimizer_step`` (gradients complete, unscaled)::

        def on_before_optimizer_step(self, optimizer):
            self.log_dict(grad_norm(self.layer, norm_type=2))

    :param module: the module whose parameters' gradients are measured (parameters without a gradient are left
        out).
    :param norm_type: the p of the p-norm: a positive number, or ``"inf"`` (the largest absolute value).
    :param group_separator: what joins the metric group and the parameter name (``"/"`` groups the curves in
        TensorBoard).
    :return: ``{"grad_<p>_norm<sep><parameter name>": norm, ..., "grad_<p>_norm_total": norm}`` with ``<p>`` the
        float norm type (``grad_2.0_norm/weight``); the values are 0-dimensional tensors on the gradients' device
        (nothing is copied to the host). Empty when no parameter has a gradient. The total is the norm of all
        gradients as one vector.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"grad_norm(module=...) needs a torch.nn.Module, got {type(module).__name__}")
    p = _parse_norm_type(norm_type)
    prefix = f"grad_{p}_norm"
    norms = {f"{prefix}{group_separator}{name}": torch.linalg.vector_norm(param.grad.detach(), ord=p)
             for name, param in module.named_parameters() if param.grad is not None}
    if norms:
        values = list(norms.values())
        device = values[0].device
        # the p-norm of all gradients as one vector is the p-norm of the per-parameter p-norms (inf: their maximum)
        stacked = torch.stack([v.to(device=device, dtype=torch.float32) for v in values])
        norms[f"{prefix}_total"] = torch.linalg.vector_norm(stacked, ord=p)
    return norms
