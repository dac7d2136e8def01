"""A table of a model's layers and parameter counts (Lightning's ``ModelSummary``), printed by the Trainer at the
start of ``fit`` when ``enable_model_summary=True``."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter

#: an empty search path, as Lightning's lightning.pytorch.utilities.model_summary (an alias of this module) is a
#: package: importing a path below it that Lightning has and accelkit lacks reaches
#: :class:`accelkit.compat.MissingModuleFinder`, which says what to import instead (Python would stop at "is not a
#: package"); no module is found below this one
__path__: list[str] = []

__all__ = ["ModelSummary", "summarize"]


def _is_lazy(parameter: torch.Tensor) -> bool:
    return isinstance(parameter, UninitializedParameter)


def _count(parameters: list[nn.Parameter]) -> tuple[int, bool]:
    """Elements of the initialised parameters, and whether any parameter is still uninitialised (lazy)."""
    known = sum(p.numel() for p in parameters if not _is_lazy(p))
    return known, any(_is_lazy(p) for p in parameters)


def _human(count: int) -> str:
    """``1234567`` → ``"1.2 M"``; counts under a thousand as they are."""
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return str(count)


def _shown(count: int, lazy: bool) -> str:
    """A parameter count for the table: ``"?"`` when all of it is uninitialised, ``"<n> + ?"`` when part is."""
    if lazy:
        return f"{_human(count)} + ?" if count else "?"
    return _human(count)


class ModelSummary:
    """The layers of ``module`` down to ``max_depth`` with their type, parameter count and mode, and totals.

    Each parameter is counted once, however many layers share it. Parameters of lazy layers (``nn.LazyLinear``
    before its first forward) have no size yet: they are shown as ``?`` and left out of the counts, and
    :attr:`has_uninitialized` is true.

    :param module: the model (any ``torch.nn.Module``).
    :param max_depth: how deep to list layers: 1 for the direct children, ``-1`` for every layer, 0 for the
        totals only.
    """

    def __init__(self, module: nn.Module, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"max_depth must be -1 (every layer), 0 (totals only) or a positive int, "
                             f"got {max_depth!r}")
        self.module = module
        self.max_depth = max_depth
        parameters = list(module.parameters())  # deduplicated by identity
        self._total, self._lazy = _count(parameters)
        self._trainable, self._trainable_lazy = _count([p for p in parameters if p.requires_grad])
        self._bytes = sum(p.numel() * p.element_size() for p in parameters if not _is_lazy(p))
        modules = list(module.named_modules())[1:]  # the root is the totals
        self._modes = [m.training for _, m in modules]
        if max_depth == 0:
            modules = []
        elif max_depth > 0:
            modules = [(name, m) for name, m in modules if name.count(".") < max_depth]
        self._layers = modules

    @property
    def layer_names(self) -> list[str]:
        """Qualified names of the listed layers (``"encoder.0"``)."""
        return [name for name, _ in self._layers]

    @property
    def layer_types(self) -> list[str]:
        """Class names of the listed layers."""
        return [type(m).__name__ for _, m in self._layers]

    @property
    def param_nums(self) -> list[int]:
        """Initialised parameter elements of each listed layer (its sub-layers included, shared ones once)."""
        return [_count(list(m.parameters()))[0] for _, m in self._layers]

    @property
    def training_modes(self) -> list[bool]:
        """Whether each listed layer is in training mode."""
        return [m.training for _, m in self._layers]

    @property
    def total_parameters(self) -> int:
        """Initialised parameter elements of the whole model, each shared parameter once."""
        return self._total

    @property
    def trainable_parameters(self) -> int:
        """Those of :attr:`total_parameters` with ``requires_grad``."""
        return self._trainable

    @property
    def has_uninitialized(self) -> bool:
        """Whether some parameters are uninitialised (lazy), so the counts leave them out."""
        return self._lazy

    @property
    def model_size(self) -> float:
        """Estimated size of the initialised parameters in megabytes (10^6 bytes), from their dtypes."""
        return self._bytes / 1e6

    @property
    def total_training_modes(self) -> dict[str, int]:
        """How many sub-modules (every depth, the model itself excluded) are in ``train`` and ``eval`` mode."""
        train = sum(self._modes)
        return {"train": train, "eval": len(self._modes) - train}

    def __str__(self) -> str:
        lines: list[str] = []
        if self._layers:
            header = ["", "Name", "Type", "Params", "Mode"]
            rows = [[str(i), name, type(m).__name__, _shown(*_count(list(m.parameters()))),
                     "train" if m.training else "eval"] for i, (name, m) in enumerate(self._layers)]
            widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

            def line(cells: list[str]) -> str:
                return " | ".join(c.rjust(w) if k in (0, 3) else c.ljust(w)
                                  for k, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

            rule = "-" * max(len(line(r)) for r in [header, *rows])
            lines += [rule, line(header), rule, *map(line, rows), rule]
        lazy = self._lazy
        modes = self.total_training_modes
        totals = [
            (_shown(self._trainable, self._trainable_lazy), "Trainable params"),
            (_human(self._total - self._trainable), "Non-trainable params"),
            (_shown(self._total, lazy), "Total params"),
            (f"{self.model_size:,.3f}" + (" + ?" if lazy else ""), "Total estimated model params size (MB)"),
            (str(modes["train"]), "Modules in train mode"),
            (str(modes["eval"]), "Modules in eval mode"),
        ]
        width = max(len(value) for value, _ in totals)
        lines += [f"{value.ljust(width)}  {label}" for value, label in totals]
        if lazy:
            lines.append("? = uninitialized (lazy) parameters, not counted until the first forward pass")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def summarize(module: nn.Module, max_depth: int = 1, print_fn: Callable[[str], object] | None = print) -> ModelSummary:
    """Build the :class:`ModelSummary` of ``module`` and show it with ``print_fn`` (``print`` by default;
    ``None`` shows nothing). Returns the summary."""
    summary = ModelSummary(module, max_depth=max_depth)
    if print_fn is not None:
        print_fn(str(summary))
    return summary
