"""A user's own DistributedSampler on real XLA (PJRT_DEVICE=CPU), and the torch_xla 1.x names it is built with.

Scenarios in ``sampler_scenarios.py``: the two one-core ones in one interpreter (``single``, read by two tests),
each multi-replica one in its own (a process launches replicas once). The multi-replica runs swap the collective
as documented in ``xla_scenarios.FlatBufferAllReduceSpawn`` (stock collectives abort on the CPU).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xla, pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

SCRIPT = "sampler_scenarios.py"


@pytest.fixture(scope="module")
def single(tmp_path_factory, run_scenario) -> dict:
    """The one-core scenarios ``sampler_single`` then ``legacy_names``, in one process: {name: result}."""
    return run_scenario("single", tmp_path_factory.mktemp("sampler_single"), script=SCRIPT)


def test_xla_single_uses_a_hand_built_distributed_sampler_as_given(single) -> None:
    """num_replicas=2, rank=1 (torch_xla.runtime.world_size()/global_ordinal() + 1) on one core: the loader is
    not re-sharded, so exactly rank 1's 32 of 64 samples are read, in DistributedSampler's own order for each
    epoch (set_epoch is called before every epoch)."""
    result = single["sampler_single"]
    assert result["strategy"] == "XLASingleStrategy"
    assert result["runtime"] == [1, 0] and result["sampler"] == [2, 1]
    for epoch in range(3):
        assert len(result["epochs"][str(epoch)]) == 32
        assert result["epochs"][str(epoch)] == result["expected"][epoch]
    assert result["expected"][0] != result["expected"][1] != result["expected"][2]  # the order moves per epoch
    assert result["sampler_epochs"] == [0, 1, 2]
    assert not [w for w in result["warnings"] if "batch_sampler" in w or "IterableDataset" in w]


def test_xla_spawn_replicas_read_their_own_half_through_the_users_sampler(tmp_path, run_scenario) -> None:
    """The TPU guide's sampler with torch_xla 2.x names on 2 replicas: 32 samples each per epoch, disjoint."""
    result = run_scenario("sampler_spawn", tmp_path, script=SCRIPT, CPU_NUM_DEVICES="2", XLA_THREAD_POOL_SIZE="4")
    ranks = result["ranks"]
    assert [r["runtime"] for r in ranks] == [[2, 0], [2, 1]]
    for epoch in range(2):
        read = [r["epochs"][str(epoch)] for r in ranks]
        assert [len(x) for x in read] == [32, 32]
        assert sorted(read[0] + read[1]) == list(range(64))
        assert read == [result["expected"][0][epoch], result["expected"][1][epoch]]
    assert [r["sampler_epochs"] for r in ranks] == [[0, 1], [0, 1]]


LEGACY = {"xrt_world_size": "torch_xla.runtime.world_size()", "get_ordinal": "torch_xla.runtime.global_ordinal()"}


def _one_warning_per_name(caught: list[str]) -> None:
    """Exactly one TorchXLALegacyNameWarning per name, naming its torch_xla 2.x replacement."""
    assert len(caught) == 2, caught
    for name, replacement in LEGACY.items():
        mine = [w for w in caught if w.startswith(f"TorchXLALegacyNameWarning: xm.{name}() is a torch_xla 1.x name")]
        assert len(mine) == 1, (name, caught)
        assert f"Use {replacement} instead" in mine[0]


@pytest.mark.slow
def test_the_guides_torch_xla_1x_names_answer_inside_an_xla_single_run(single) -> None:
    """xm.xrt_world_size()/xm.get_ordinal(), as attributes and imported by name, answer 1 and 0 during fit, with
    one warning per name for the whole process (the second fit and the repeated calls warn no more); after fit
    they are gone again and torch_xla's own AttributeError is back. (``sampler_single`` ran before in the process,
    with torch_xla 2.x names only: these are the first legacy names it calls.)"""
    result = single["legacy_names"]
    for how in ("attribute", "import"):
        assert result[how]["runtime"] == [1, 0] and result[how]["sampler"] == [1, 0], result[how]
    _one_warning_per_name(result["attribute"]["caught"])
    assert result["import"]["caught"] == []  # the same process: warned once already
    after = result["after"]
    assert after["left_on_xla_model"] == []
    assert after["call_outside"] == ("AttributeError: module 'torch_xla.core.xla_model' has no attribute "
                                     "'xrt_world_size'")


@pytest.mark.slow
def test_the_guides_torch_xla_1x_names_answer_in_every_replica(tmp_path, run_scenario) -> None:
    """2 replicas of xla_spawn: the guide's sampler from xm.xrt_world_size()/xm.get_ordinal() gives each replica
    its own half (num_replicas 2, ranks 0 and 1). On PJRT_DEVICE=CPU both replicas are threads of one process,
    which warns once per name."""
    result = run_scenario("legacy_names_spawn", tmp_path, script=SCRIPT, CPU_NUM_DEVICES="2",
                          XLA_THREAD_POOL_SIZE="4")
    ranks = result["ranks"]
    assert [r["runtime"] for r in ranks] == [[2, 0], [2, 1]]
    assert [r["sampler"] for r in ranks] == [[2, 0], [2, 1]]
    for epoch in range(2):
        read = [r["epochs"][str(epoch)] for r in ranks]
        assert sorted(read[0] + read[1]) == list(range(64))
        assert read == [result["expected"][0][epoch], result["expected"][1][epoch]]
    assert ranks[0]["pid"] == ranks[1]["pid"]  # one process, a thread per replica (torch_xla on the CPU)
    for rank in ranks:
        _one_warning_per_name(rank["caught"])
