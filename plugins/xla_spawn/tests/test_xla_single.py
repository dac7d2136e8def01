"""Single-core XLA runs on the real torch_xla (PJRT_DEVICE=CPU), in an interpreter of their own (shared with
``test_xla_spawn.py``'s check of a spawn after them: ``conftest.single_run``)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]


@pytest.fixture(scope="module")
def single(single_run: dict) -> dict:
    """The single-core scenario's result (one run for the session: ``conftest.single_run``)."""
    return single_run


def test_auto_strategy_for_one_core_is_xla_single(single: dict) -> None:
    assert single["strategy"] == "XLASingleStrategy"
    assert single["param_device"].startswith("xla:")


def test_single_core_loss_falls(single: dict) -> None:
    losses = single["epoch_losses"]
    assert len(losses) == 4
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.2 * losses[0], losses


def test_compilations_stay_constant_after_the_first_steps(single: dict) -> None:
    """The first epoch compiles the step graph and the epoch-end graph; from then on nothing compiles, and
    within an epoch no step after the first compiles. The negative control (an input shape that changes
    each step) shows the same counter does catch per-step recompilation."""
    rows = single["rows"]
    assert rows[0]["compiles"] >= 1
    first_epoch = [r["compiles"] for r in rows if r["epoch"] == 0]
    assert len(set(first_epoch[1:])) == 1, first_epoch
    later = [r["compiles"] for r in rows if r["epoch"] >= 1]
    assert len(set(later)) == 1, later
    grow = [r["compiles"] for r in single["grow_rows"]]
    assert grow[3] - grow[0] == 3, grow  # the control recompiles for each new shape


def test_no_device_to_host_transfer_per_step(single: dict) -> None:
    """With log_every_n_steps larger than an epoch, nothing in the loop reads a device value per step: the
    transfer counter moves only at epoch ends. The ``.item()``-every-step control moves it every step."""
    rows = single["rows"]
    for epoch in range(4):
        counts = [r["from_device"] for r in rows if r["epoch"] == epoch]
        assert len(counts) == 8 and len(set(counts)) == 1, (epoch, counts)
    item = [r["from_device"] for r in single["item_rows"]]
    assert all(b == a + 1 for a, b in zip(item, item[1:], strict=False)), item


def test_batches_with_non_tensor_objects(single: dict) -> None:
    assert single["batch_devices"] == ["xla"]
    assert single["names_type"] == ["list"]
    assert single["names_first_epoch"] == [f"sample-{i}" for i in range(64)]


def test_checkpoint_is_on_the_cpu(single: dict) -> None:
    assert single["checkpoint_exists"]
    assert single["checkpoint_devices"] == ["cpu"]


def test_weight_tying_survives_the_move_and_training(single: dict) -> None:
    tie = single["tie"]
    assert tie["same_object"] is True
    assert tie["equal_values"] is True
    assert tie["device"].startswith("xla:")
    assert tie["num_params"] == 2  # layer_1/3 shared + layer_2
    assert tie["trained"] is True
    assert tie["warnings"] == []
