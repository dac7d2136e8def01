"""The cuda accelerator recognises the GPU running out of memory (what ``Tuner.scale_batch_size`` asks it).

The error classes and texts are checked everywhere; on a GPU a real allocation failure is provoked, and the
batch-size search runs against a model that asks for more memory than the GPU has past a batch size.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import accelkit
from accelkit.tuner import Tuner
from accelkit_cuda.accelerator import CUDAAccelerator

HAS_GPU = torch.cuda.is_available()


def test_cuda_out_of_memory_errors_are_recognised_by_class_and_text():
    cuda = CUDAAccelerator()
    assert cuda.is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert cuda.is_out_of_memory(RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be ..."))
    assert cuda.is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not cuda.is_out_of_memory(RuntimeError("CUDA error: device-side assert triggered"))
    assert not cuda.is_out_of_memory(MemoryError())  # host memory is the cpu plugin's to recognise


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
def test_a_real_allocation_failure_on_the_gpu():
    cuda = CUDAAccelerator()
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # 1 PiB
    except Exception as error:  # noqa: BLE001 - whatever the runtime raises must be recognised
        assert cuda.is_out_of_memory(error), repr(error)
    else:
        raise AssertionError("a 1 PiB allocation on the GPU succeeded")
    torch.cuda.empty_cache()


class Hungry(accelkit.Module):
    """Needs more GPU memory than any GPU has once a batch exceeds ``limit`` samples."""

    def __init__(self, batch_size: int = 2, limit: int = 96):
        super().__init__()
        self.batch_size, self.limit = batch_size, limit
        self.net = nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if x.shape[0] > self.limit:
            torch.empty(1 << 50, dtype=torch.uint8, device=self.device)
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        x = torch.randn(1024, 16)
        return DataLoader(TensorDataset(x, x[:, :1]), batch_size=self.batch_size)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("mode, expected", [("power", 64), ("binsearch", 91)])  # 96 fits, less 5%
def test_scale_batch_size_on_the_gpu(make_trainer, mode, expected):
    trainer = make_trainer(accelerator="cuda", devices=1, max_epochs=1)
    model = Hungry()
    assert Tuner(trainer).scale_batch_size(model, mode=mode) == expected
    assert model.batch_size == expected
    trainer.fit(model)
    assert trainer.global_step == -(-1024 // expected)
