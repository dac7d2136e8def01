"""What a side-by-side helper (``record(framework, root, scenario)``, run once under accelkit's Trainer and once
under Lightning's by ``fixtures.lightning_records``) builds its runs from, in one place: the framework's classes
and modules (:func:`pick`), the one-linear-layer Module several helpers train (:func:`linear_module`), its data
(:func:`random_pairs`) and a Callback that reads the Trainer from a list of hooks (:func:`reading_callback`).

It imports neither framework until :func:`pick` is called, and no pytest: a worker of a spawned fit re-imports the
helper that named its classes, and this module with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

FRAMEWORKS = ("accelkit", "lightning")


class Framework(NamedTuple):
    """One framework's classes and modules, under names common to both (accelkit's ``Module`` is Lightning's
    ``LightningModule``)."""

    Module: type
    Callback: type
    Trainer: type
    callbacks: ModuleType
    loggers: ModuleType
    profilers: ModuleType


def pick(framework: str) -> Framework:
    """The classes and modules of ``framework``: ``"accelkit"`` or ``"lightning"`` (``lightning.pytorch``)."""
    if framework == "lightning":
        import lightning.pytorch as pl
        from lightning.pytorch import callbacks, loggers, profilers

        return Framework(pl.LightningModule, pl.Callback, pl.Trainer, callbacks, loggers, profilers)
    if framework != "accelkit":
        raise ValueError(f"framework={framework!r} is not one of {FRAMEWORKS}.")
    import accelkit
    from accelkit import callbacks as accelkit_callbacks
    from accelkit import loggers as accelkit_loggers
    from accelkit import profilers as accelkit_profilers

    return Framework(accelkit.Module, accelkit.Callback, accelkit.Trainer, accelkit_callbacks, accelkit_loggers,
                     accelkit_profilers)


def linear_module(base: type, lr: float) -> type:
    """A Module class on ``base`` (:attr:`Framework.Module`): ``self.layer``, an ``nn.Linear(4, 1)`` made after
    ``torch.manual_seed(0)``, trained on the mean squared error of a batch's ``(input, target)`` by SGD at ``lr``.
    Subclass it to log, or to add or replace steps."""

    class LinearNet(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return F.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=lr)

    return LinearNet


def random_pairs(n: int, generator: torch.Generator) -> TensorDataset:
    """``n`` pairs of a 4-feature input and a random 1-value target for :func:`linear_module`, drawn from
    ``generator`` (the inputs first), so that sets drawn one after the other from one generator differ. Not
    ``helpers.models.regression_data`` (a fitted line, seeded anew per call): that module imports accelkit, and
    a Lightning run should import Lightning alone."""
    return TensorDataset(torch.randn(n, 4, generator=generator), torch.randn(n, 1, generator=generator))


def reading_callback(base: type, hooks: Iterable[str], read: Callable[..., None]) -> type:
    """A Callback class on ``base`` (:attr:`Framework.Callback`) whose every hook of ``hooks`` calls
    ``read(hook, trainer, *the hook's other arguments)``."""

    def reader(hook: str) -> Callable[..., None]:
        def on_hook(self: Any, trainer: Any, *args: Any) -> None:
            read(hook, trainer, *args)

        on_hook.__name__ = hook
        return on_hook

    return type("Reader", (base,), {hook: reader(hook) for hook in hooks})
