"""Fixtures for the accelkit-cuda tests.

Runs are composed with exactly the cpu and cuda plugins (entry-point discovery off), so these tests do not
depend on which other plugins happen to be installed. GPU counts are simulated, where a test needs several
GPUs on a machine without them, by replacing ``CUDAAccelerator.device_count``: that exercises accelkit's
parsing and selection, never training.
"""

from __future__ import annotations

import pytest
import torch

import accelkit
import accelkit_cpu.plugin as cpu_plugin
import accelkit_cuda.plugin as cuda_plugin
from accelkit_cuda.accelerator import CUDAAccelerator

GPU_SKIP_REASON = "needs an NVIDIA GPU (torch.cuda.is_available() is False)"


@pytest.fixture
def make_trainer(isolated):
    """``make_trainer(**kwargs)``: a Trainer that sees only the cpu and cuda plugins, without logs or bars."""

    def make(**kwargs):
        kwargs.setdefault("logger", False)
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("enable_checkpointing", False)
        plugins = list(kwargs.pop("plugins", []))
        return accelkit.Trainer(plugins=[cuda_plugin, cpu_plugin, *plugins], **kwargs)

    return make


@pytest.fixture
def simulate_gpus(monkeypatch):
    """``simulate_gpus(n)``: make the cuda accelerator count ``n`` visible GPUs."""

    def set_count(n: int) -> None:
        monkeypatch.setattr(CUDAAccelerator, "device_count", classmethod(lambda cls: n))

    return set_count


@pytest.fixture
def no_cuda_init(monkeypatch):
    """Fail the test if anything asks torch to initialise CUDA (``torch.cuda._lazy_init``/``init``).

    On a machine without a GPU ``torch.cuda.is_initialized()`` can never become true, so it alone would prove
    nothing here; this spy records every attempt, successful or not. On a GPU machine an earlier test in the
    same process (a real training run) may already have initialised CUDA; the spy still catches every request
    made during this test, and ``is_initialized()`` is checked only where CUDA was not initialised before it.
    """
    calls: list[str] = []
    initialised_before = torch.cuda.is_initialized()
    original_lazy, original_init = torch.cuda._lazy_init, torch.cuda.init

    def lazy_spy():
        calls.append("torch.cuda._lazy_init")
        return original_lazy()

    def init_spy():
        calls.append("torch.cuda.init")
        return original_init()

    monkeypatch.setattr(torch.cuda, "_lazy_init", lazy_spy)
    monkeypatch.setattr(torch.cuda, "init", init_spy)
    yield calls
    assert calls == [], f"CUDA initialisation was requested: {calls}"
    if not initialised_before:
        assert not torch.cuda.is_initialized()
