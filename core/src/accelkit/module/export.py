"""Saving a Module for use without Python training code: :meth:`ExportMixin.to_torchscript` and
:meth:`ExportMixin.to_onnx` (Lightning's ``LightningModule`` methods of the same names)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import torch

from accelkit.utilities.apply_func import move_to_device


class ExportMixin:
    """``to_torchscript`` and ``to_onnx`` for :class:`~accelkit.Module`; both run the module in evaluation mode
    and put its training mode back afterwards."""

    if TYPE_CHECKING:  # what the exports use of the Module this class is part of (for the type checker)
        @property
        def device(self) -> torch.device: ...

    def _export_input(self, given: object, method: str, argument: str) -> object:
        """``given``, else ``example_input_array``, moved to the module's device."""
        sample = given if given is not None else getattr(self, "example_input_array", None)
        if sample is None:
            raise ValueError(f"{type(self).__name__}.{method}() needs an example input: pass {argument}=... or set "
                             "`self.example_input_array` (a tensor, or a tuple of the forward's positional "
                             "arguments) in __init__")
        return move_to_device(sample, self.device)

    @torch.no_grad()
    def to_torchscript(self, file_path: str | os.PathLike | None = None, method: str = "script",
                       example_inputs: object = None, **kwargs: Any) -> torch.jit.ScriptModule:
        """The module as TorchScript (``torch.jit.ScriptModule``), saved to ``file_path`` when given.

        :param file_path: where to write it (``torch.jit.save``); ``None``: not written.
        :param method: ``"script"`` (``torch.jit.script``: control flow is kept) or ``"trace"``
            (``torch.jit.trace`` on ``example_inputs``: records the operations one input runs).
        :param example_inputs: the input to trace with (default ``self.example_input_array``); ``"trace"`` only.
        :param kwargs: passed to ``torch.jit.script`` / ``torch.jit.trace``.
        """
        with _in_eval_mode(cast(torch.nn.Module, self)):  # (a Module, as in to_onnx)
            if method == "script":
                scripted = torch.jit.script(self, **kwargs)
            elif method == "trace":
                sample = self._export_input(example_inputs, "to_torchscript(method='trace')", "example_inputs")
                scripted = torch.jit.trace(self, example_inputs=sample, **kwargs)
            else:
                raise ValueError(f"to_torchscript(method={method!r}): use 'script' or 'trace'")
        if file_path is not None:
            torch.jit.save(scripted, os.fspath(file_path))
        return scripted

    @torch.no_grad()
    def to_onnx(self, file_path: str | os.PathLike | None, input_sample: object = None,
                **kwargs: Any) -> torch.onnx.ONNXProgram | None:
        """Export the module to ONNX with ``torch.onnx.export`` (what it returns is returned).

        :param file_path: the ``.onnx`` file to write.
        :param input_sample: the forward's input (a tensor or a tuple of positional arguments; default
            ``self.example_input_array``), moved to the module's device.
        :param kwargs: passed to ``torch.onnx.export`` (``dynamo=False`` chooses torch's older exporter,
            ``input_names``, ``dynamic_axes`` ...).
        :raises ModuleNotFoundError: the ``onnx`` package (and, for torch's default exporter, ``onnxscript``) is
            not installed; the message says what to install.
        """
        _require_onnx(type(self).__name__, kwargs.get("dynamo"))
        sample = self._export_input(input_sample, "to_onnx", "input_sample")
        args = sample if isinstance(sample, tuple) else (sample,)
        # cast: this class is only ever part of a Module, which is a torch.nn.Module
        module = cast(torch.nn.Module, self)
        with _in_eval_mode(module):
            return torch.onnx.export(module, args,
                                     None if file_path is None else os.fspath(file_path), **kwargs)


@contextlib.contextmanager
def _in_eval_mode(module: torch.nn.Module) -> Iterator[None]:
    """``module`` in evaluation mode for the block; its training mode is put back afterwards."""
    training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(training)


def _require_onnx(owner: str, dynamo: object) -> None:
    """Raise a clear error when the packages ``torch.onnx.export`` needs are missing."""
    if importlib.util.find_spec("onnx") is None:
        raise ModuleNotFoundError(f"{owner}.to_onnx() needs the 'onnx' package, which is not installed: pip install "
                                  "onnx onnxscript  (onnxscript for torch's default exporter; with dynamo=False "
                                  "onnx alone is enough)", name="onnx")
    if dynamo is not False and importlib.util.find_spec("onnxscript") is None:
        raise ModuleNotFoundError(f"{owner}.to_onnx() uses torch's default ONNX exporter, which needs the "
                                  "'onnxscript' package: pip install onnxscript, or pass dynamo=False for the older "
                                  "exporter", name="onnxscript")
