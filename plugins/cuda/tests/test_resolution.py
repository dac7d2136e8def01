"""Device parsing, selection and configuration errors of the cuda plugin; none of it needs or touches a GPU."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
import torch

import accelkit
from accelkit import ConfigurationError
from accelkit.precision import MixedPrecision, Precision, TruePrecision
from accelkit_cuda import _nvml
from accelkit_cuda.accelerator import CUDAAccelerator
from accelkit_cuda.precision import CUDABF16MixedPrecision, CUDABF16TruePrecision
from accelkit_cuda.strategies import CUDADDPSpawnStrategy, CUDADDPStrategy, CUDASingleDeviceStrategy


# ----------------------------------------------------------------------------------------------- devices
@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        (1, [0]),
        (3, [0, 1, 2]),
        ("2", [0, 1]),  # a single number is a count, as an int is
        ([2], [2]),
        ([3, 1], [3, 1]),
        ("0,1", [0, 1]),
        ("1,3", [1, 3]),
        ("2,", [2]),
        (-1, [0, 1, 2, 3]),
        ("-1", [0, 1, 2, 3]),
        ("auto", [0, 1, 2, 3]),
    ],
)
def test_parse_devices(simulate_gpus, devices, expected):
    simulate_gpus(4)
    assert CUDAAccelerator.parse_devices(devices) == expected


def test_missing_index_names_the_gpus_that_exist(simulate_gpus, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    simulate_gpus(2)
    with pytest.raises(ConfigurationError) as info:
        CUDAAccelerator.parse_devices([0, 3])
    message = str(info.value)
    assert "index 3 does not exist" in message
    assert "[0, 1]" in message


def test_missing_index_mentions_cuda_visible_devices(simulate_gpus, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6")
    simulate_gpus(2)
    with pytest.raises(ConfigurationError) as info:
        CUDAAccelerator.parse_devices("0,2")
    message = str(info.value)
    assert "index 2 does not exist" in message
    assert "CUDA_VISIBLE_DEVICES='5,6' leaves 2 GPUs visible" in message


@pytest.mark.parametrize("devices", [5, "5", [0, 0], 0, "gpu0", True, 1.5, []])
def test_bad_devices_are_named(simulate_gpus, devices):
    simulate_gpus(4)
    with pytest.raises(ConfigurationError) as info:
        CUDAAccelerator.parse_devices(devices)
    assert f"devices={devices!r}" in str(info.value)


def test_trainer_reports_device_error(make_trainer, simulate_gpus):
    simulate_gpus(1)
    with pytest.raises(ConfigurationError, match=r"index 1 does not exist"):
        make_trainer(accelerator="cuda", devices=[1])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("1,0", [1, 0]),
        ("3", [3]),
        ("2, 4", [2, 4]),
        ("0,0", []),  # a repeated GPU hides all, as in CUDA
        ("2,-1,3", [2]),  # parsing stops at the first invalid entry
        ("", []),
        ("GPU-aaaa,GPU-bbbb", ["GPU-aaaa", "GPU-bbbb"]),
        ("MIG-xyz", ["MIG-xyz"]),
    ],
)
def test_cuda_visible_devices_parsing(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    assert _nvml.visible_device_spec() == expected


# ----------------------------------------------------------------------------------------------- availability
def test_no_gpu_here_is_reported_clearly(make_trainer):
    if torch.cuda.device_count() > 0:
        pytest.skip("a GPU is visible: this test covers machines without one")
    assert not CUDAAccelerator.is_available()
    with pytest.raises(ConfigurationError) as info:
        make_trainer(accelerator="gpu")
    message = str(info.value)
    assert "'gpu' is installed but not available here" in message
    assert CUDAAccelerator.unavailable_reason() in message


def test_hidden_gpus_blame_cuda_visible_devices(monkeypatch, simulate_gpus):
    if torch.version.cuda is None:
        pytest.skip("this torch has no CUDA; the reason is then the torch build")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    simulate_gpus(0)
    assert not CUDAAccelerator.is_available()
    assert "CUDA_VISIBLE_DEVICES=''" in CUDAAccelerator.unavailable_reason()


def test_real_count_and_availability_do_not_initialise_cuda(no_cuda_init):
    count = CUDAAccelerator.device_count()
    assert count == torch.cuda.device_count()
    assert CUDAAccelerator.is_available() == (count > 0)
    assert isinstance(CUDAAccelerator.unavailable_reason(), str)


def test_cpu_trainer_does_not_initialise_cuda(make_trainer, no_cuda_init):
    trainer = make_trainer(accelerator="cpu", devices=1)
    assert trainer.accelerator.name == "cpu"


# ----------------------------------------------------------------------------------------------- selection
def test_auto_prefers_cuda_when_a_gpu_is_there(make_trainer, simulate_gpus, no_cuda_init):
    simulate_gpus(2)
    trainer = make_trainer(accelerator="auto", devices="auto")
    assert isinstance(trainer.accelerator, CUDAAccelerator)
    assert trainer.config.devices == [0, 1]
    assert isinstance(trainer.strategy, CUDADDPSpawnStrategy)
    assert trainer.strategy.name == "ddp_spawn"
    assert trainer.world_size == 2
    assert trainer.strategy.root_device == torch.device("cuda", 0)


def test_auto_falls_back_to_cpu_without_gpus(make_trainer, simulate_gpus, no_cuda_init):
    simulate_gpus(0)
    trainer = make_trainer(accelerator="auto")
    assert trainer.accelerator.name == "cpu"


def test_one_gpu_is_single_device(make_trainer, simulate_gpus, no_cuda_init):
    simulate_gpus(4)
    trainer = make_trainer(accelerator="cuda", devices=[2])
    assert isinstance(trainer.strategy, CUDASingleDeviceStrategy)
    assert trainer.strategy.root_device == torch.device("cuda", 2)
    assert trainer.accelerator.pin_memory is True  # batches are copied with non_blocking=True
    assert trainer.strategy.pin_memory is False  # loaders are used as given
    assert trainer.accelerator.distributed_backend == "nccl"


def test_multi_node_under_torchrun_is_ddp(make_trainer, simulate_gpus, monkeypatch, no_cuda_init):
    simulate_gpus(2)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("MASTER_ADDR", "node0")  # torchrun sets the rendezvous host (without it they look stale)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    trainer = make_trainer(accelerator="gpu", devices=2, num_nodes=2)
    assert isinstance(trainer.strategy, CUDADDPStrategy)
    assert (trainer.global_rank, trainer.local_rank, trainer.strategy.node_rank) == (3, 1, 1)
    assert trainer.strategy.root_device == torch.device("cuda", 1)


def test_ddp_without_launcher_says_how_to_launch(make_trainer, simulate_gpus):
    simulate_gpus(2)
    with pytest.raises(ConfigurationError, match="torchrun --nproc-per-node 2"):
        make_trainer(accelerator="cuda", devices=2, strategy="ddp")


def test_ddp_spawn_refuses_several_nodes(make_trainer, simulate_gpus):
    simulate_gpus(2)
    with pytest.raises(ConfigurationError, match="num_nodes=2"):
        make_trainer(accelerator="cuda", devices=2, num_nodes=2, strategy="ddp_spawn")


@pytest.mark.parametrize(
    ("name", "cls", "options"),
    [
        ("ddp_spawn_find_unused_parameters_true", CUDADDPSpawnStrategy, {"find_unused_parameters": True}),
        ("ddp_spawn_find_unused_parameters_false", CUDADDPSpawnStrategy, {"find_unused_parameters": False}),
        ("DDP-Spawn", CUDADDPSpawnStrategy, {}),
    ],
)
def test_ddp_options_from_strategy_string(make_trainer, simulate_gpus, name, cls, options):
    simulate_gpus(2)
    trainer = make_trainer(accelerator="cuda", devices=2, strategy=name)
    assert type(trainer.strategy) is cls
    assert trainer.strategy.options == options


def test_ddp_options_on_strategy_object(make_trainer, simulate_gpus):
    simulate_gpus(2)
    strategy = CUDADDPSpawnStrategy(find_unused_parameters=True, static_graph=False, pin_memory=False)
    trainer = make_trainer(accelerator="cuda", devices=2, strategy=strategy)
    assert trainer.strategy is strategy
    assert strategy.options == {"find_unused_parameters": True, "static_graph": False}
    assert strategy.pin_memory is False


def test_unknown_ddp_option_is_named():
    with pytest.raises(ConfigurationError, match=r"find_unused_params"):
        CUDADDPStrategy(find_unused_params=True)


def test_cpu_strategy_name_is_not_offered_for_gpu(make_trainer, simulate_gpus):
    simulate_gpus(1)
    with pytest.raises(ConfigurationError) as info:
        make_trainer(accelerator="cuda", strategy="ddp_sharded")
    assert "strategy 'ddp_sharded' is not available" in str(info.value)
    assert "ddp_spawn" in str(info.value)


# ----------------------------------------------------------------------------------------------- precision
@pytest.mark.parametrize(
    ("precision", "cls", "dtype", "scaler"),
    [
        ("32-true", Precision, None, None),
        (32, Precision, None, None),
        ("16-mixed", MixedPrecision, torch.float16, True),
        (16, MixedPrecision, torch.float16, True),
        ("bf16-mixed", CUDABF16MixedPrecision, torch.bfloat16, False),
        ("bf16", CUDABF16MixedPrecision, torch.bfloat16, False),
        ("bf16-true", CUDABF16TruePrecision, torch.bfloat16, None),
        ("16-true", TruePrecision, torch.float16, None),
        ("64-true", TruePrecision, torch.float64, None),
    ],
)
def test_precisions(make_trainer, simulate_gpus, monkeypatch, no_cuda_init, precision, cls, dtype, scaler):
    monkeypatch.setattr(_nvml, "visible_gpus", lambda: None)  # bf16 support unknown: checked in the worker
    simulate_gpus(1)
    trainer = make_trainer(accelerator="cuda", precision=precision)
    assert type(trainer.precision) is cls
    if dtype is not None:
        assert trainer.precision.dtype == dtype
    if scaler is not None:
        assert trainer.precision.use_scaler is scaler
    if isinstance(trainer.precision, MixedPrecision):
        assert trainer.precision.accelerator.autocast_device_type == "cuda"


def _gpus(*capabilities):
    return [_nvml.GPUInfo(index=i, name=f"GPU model {c[0]}{c[1]}", capability=c) for i, c in enumerate(capabilities)]


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_bf16_refused_on_gpu_without_it(make_trainer, simulate_gpus, monkeypatch, no_cuda_init, precision):
    simulate_gpus(2)
    monkeypatch.setattr(_nvml, "visible_gpus", lambda: _gpus((8, 0), (7, 0)))
    with pytest.raises(ConfigurationError) as info:
        make_trainer(accelerator="cuda", devices=[1], precision=precision)
    message = str(info.value)
    assert f"precision {precision!r} needs native bfloat16" in message
    assert "GPU 1 (GPU model 70) has compute capability 7.0" in message
    assert "'16-mixed'" in message
    ok = make_trainer(accelerator="cuda", devices=[0], precision=precision)
    assert ok.precision.dtype == torch.bfloat16


def test_bf16_check_names_each_bad_gpu(make_trainer, simulate_gpus, monkeypatch):
    simulate_gpus(3)
    monkeypatch.setattr(_nvml, "visible_gpus", lambda: _gpus((7, 5), (9, 0), (6, 1)))
    with pytest.raises(ConfigurationError) as info:
        make_trainer(accelerator="cuda", devices=-1, precision="bf16-mixed")
    assert [p.split("(")[0] for p in info.value.problems if "bfloat16" in p] == [
        "precision 'bf16-mixed' needs native bfloat16 ", "precision 'bf16-mixed' needs native bfloat16 "]
    assert "GPU 0 " in info.value.problems[0] and "GPU 2 " in info.value.problems[1]


def test_nvml_absent_here_means_unknown():
    if torch.cuda.device_count() > 0:
        pytest.skip("a GPU (and so NVML) is present")
    assert _nvml.visible_gpus() is None


# ----------------------------------------------------------------------------------------------- runtime pieces
def test_device_and_ddp_ids():
    accelerator = CUDAAccelerator()
    assert accelerator.device(3) == torch.device("cuda", 3)
    assert accelerator.ddp_device_ids(torch.device("cuda", 3)) == [3]
    with pytest.raises(ValueError, match="not an indexed CUDA device"):
        accelerator.setup_device(torch.device("cpu"))


_STATS_IN_A_FRESH_PROCESS = """
import json, torch
from accelkit_cuda.accelerator import CUDAAccelerator
stats = CUDAAccelerator().get_device_stats(torch.device("cuda", 0))
print(json.dumps([stats, torch.cuda.is_initialized()]))
"""


@pytest.mark.slow
def test_device_stats_before_cuda_is_used_are_empty():
    # a fresh interpreter: on a GPU machine an earlier test in this process has already used the GPU
    done = subprocess.run([sys.executable, "-c", _STATS_IN_A_FRESH_PROCESS], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [{}, False]  # empty, and asking did not initialise CUDA


def test_entry_point_is_declared():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="accelkit")}
    assert eps.get("cuda") == "accelkit_cuda.plugin"
    assert importlib.metadata.distribution("accelkit-cuda").version == accelkit_cuda_version()


def accelkit_cuda_version():
    from accelkit_cuda import __version__

    return __version__


def test_plugin_declares_api():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    import accelkit_cuda.plugin as plugin

    assert Version(accelkit.HOOK_API_VERSION) in SpecifierSet(plugin.ACCELKIT_API)
