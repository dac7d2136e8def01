"""``precision=16`` on the CPU, as Lightning does it: the run uses ``bf16-mixed`` (CPU autocast to bfloat16; the
CPU has no float16 autocast) and says so once, naming what it uses instead, for every spelling of the name."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.fixtures import lightning_records
from helpers.models import RegressionModule, quiet_trainer, regression_data


class DtypeSpy(RegressionModule):
    """Records the dtype the layer computes in during the training steps."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: set[torch.dtype] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layer(x)
        self.dtypes.add(out.dtype)
        return out


@pytest.mark.parametrize("spelling", [16, "16", "16-mixed", " 16-Mixed "])
def test_sixteen_mixed_runs_as_bf16_mixed_with_a_notice(spelling, tmp_path, capsys):
    model = DtypeSpy()
    trainer = quiet_trainer(tmp_path, precision=spelling, max_steps=2, enable_model_summary=False)
    notice = capsys.readouterr().err
    assert notice.count("bf16-mixed") >= 1 and "not supported on CPU" in notice, notice
    assert notice.count("accelkit: precision='16-mixed' on CPU") == 1, notice
    trainer.fit(model, DataLoader(regression_data(8), batch_size=4))
    assert model.dtypes == {torch.bfloat16}
    assert model.layer.weight.dtype == torch.float32  # mixed: the weights stay float32
    assert trainer.precision.dtype == torch.bfloat16


def test_bf16_mixed_itself_is_quiet(tmp_path, capsys):
    quiet_trainer(tmp_path, precision="bf16-mixed")
    assert "precision" not in capsys.readouterr().err


@pytest.fixture(scope="module")
def lightning_precision_runs(tmp_path_factory) -> dict[str, Any]:
    """Every scenario of ``helpers.precision_runs`` under Lightning's Trainer, in one process."""
    return lightning_records(tmp_path_factory.mktemp("lightning_precision_runs"), "precision_runs")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("scenario", ["clip_norm_accumulate_2", "clip_value", "bf16-mixed", "16-mixed", "16-true",
                                      "bf16-true", "64-true"])
def test_cpu_precisions_train_exactly_as_lightnings(tmp_path, lightning_precision_runs, scenario):
    """The same weights, bit for bit, as Lightning's Trainer after three epochs (dropout, momentum, a scheduler,
    a shuffled loader), the same parameter dtype and the same dtype for a tensor made inside ``training_step``
    (``16-true``/``bf16-true`` make it their dtype, as Lightning's true precisions; they were refused on the CPU
    before), the default dtype restored afterwards."""
    from helpers.precision_runs import record

    assert record("accelkit", str(tmp_path), scenario) == lightning_precision_runs[scenario]
