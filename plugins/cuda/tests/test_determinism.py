"""The CUDA accelerator's device-specific steps that the core asks for through Accelerator hooks: cuDNN's benchmark
mode and cuBLAS's workspace for deterministic runs, and the GPUs' random states in checkpoints."""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit_cuda.accelerator import CUDAAccelerator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (CUDA)")


class Probe(accelkit.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)
        self.seen: list[bool] = []

    def training_step(self, batch, batch_idx):
        self.seen.append(torch.backends.cudnn.benchmark)
        x, y = batch
        return nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader():
    return DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)


@pytest.mark.gpu
@pytest.mark.parametrize("cudnn_benchmark", [True, False])
def test_benchmark_sets_cudnn_benchmark_during_the_run(tmp_path, cudnn_benchmark):
    previous = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = not cudnn_benchmark
        model = Probe()
        accelkit.Trainer(accelerator="cuda", devices=1, max_epochs=1, benchmark=cudnn_benchmark, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path).fit(model, _loader())
        assert model.seen and all(seen == cudnn_benchmark for seen in model.seen)
    finally:
        torch.backends.cudnn.benchmark = previous


@pytest.mark.gpu
def test_deterministic_sets_the_cublas_workspace(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    CUDAAccelerator().configure_determinism(True, None)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


@pytest.mark.gpu
def test_gpu_random_state_round_trips():
    accelerator = CUDAAccelerator()
    torch.cuda.init()
    saved = accelerator.rng_state()
    assert set(saved) == {"cuda"} and len(saved["cuda"]) == torch.cuda.device_count()
    first = torch.rand(3, device="cuda")
    accelerator.set_rng_state(saved)
    assert torch.equal(torch.rand(3, device="cuda"), first)
