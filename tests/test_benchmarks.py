"""The benchmark scripts run: each in a tiny configuration on the CPU (their numbers are not checked here; the
benchmarks themselves, on their machines, prove the speed)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers.guards import REPO, child_env  # noqa: E402
from helpers.prewarmed import Prewarmed  # noqa: E402

BENCHMARKS = REPO / "benchmarks"


def run_benchmark(prewarmed: Prewarmed, script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python benchmarks/<script> <args>`` from the repository root, forked from the ``prewarmed`` interpreter (the
    benchmarks' subject is a run, not importing torch; the processes a benchmark starts itself are fresh ones), with
    the test process's intra-op threads (the suite's share of the cores: one on CI's two)."""
    return prewarmed.run([str(BENCHMARKS / script), *args], cwd=REPO, env=child_env(), timeout=timeout)


@pytest.mark.slow
def test_bench_cuda_runs_side_by_side_on_the_cpu_with_its_counts(prewarmed):
    done = run_benchmark(prewarmed, "bench_cuda.py", "--device", "cpu", "--rounds", "2", "--steps", "3", "--warmup",
                         "1", "--profile-steps", "2", "--count-steps", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for workload in ("mlp: MLP 32-64-4, batch 64", "transformer: transformer 2 layers d32, seq 16, batch 4"):
        assert workload in out, out
    assert "round 2/2 (accelkit > " in out, out  # the order rotates
    assert out.count("accelkit  : ") == 6 and out.count("ratio to the hand loop") >= 2, out
    assert out.count("kernel launches") == 4 and "per step, accelkit minus hand loop: " in out, out
    assert "aten::detach +1.00" in out, out  # self.log's one detach per step is named
    assert "why: self.log detaches the logged value" in out and "why: self.log copies the logged value" in out, out
    assert "not explained here" not in out, out  # every extra operator has its reason
    # the host's Python per step: a count per side, and accelkit's extra by function (its loops among them)
    assert out.count(" Python instructions, ") == 4 and out.count(" calls per step") == 4, out
    assert out.count("per step, accelkit minus hand loop, by function: ") == 2 and "accelkit/loops/" in out, out
    # timed from the module's training_step, as the hand loop marks its own steps: the fit loop's one epoch loop
    # runs, with no batch callback of the benchmark's own
    assert "FitLoop._steps" in out and "on_train_batch_" not in out, out
    # the stepping thread's CPU time beside the wall time, and the host time by function (C functions included)
    assert out.count("host CPU ratio ") >= 2 and out.count("(host CPU ") >= 6, out
    assert out.count("host time per step under cProfile") == 2 and " us, accelkit " in out, out


@pytest.fixture(scope="module")
def captured_mlp(prewarmed: Prewarmed) -> subprocess.CompletedProcess:
    """One ``bench_cuda.py --captured`` run on the MLP, read by the two tests below: the comparison of the captured
    step with the hand-compiled loop, and the instruction counts taken after the captured sides compiled (which
    ``--count-steps`` alone sets; every other option is the same for both)."""
    done = run_benchmark(prewarmed, "bench_cuda.py", "--device", "cpu", "--captured", "--workloads", "mlp", "--rounds",
                         "1", "--steps", "3", "--warmup", "3", "--profile-steps", "2", "--count-steps", "4")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.slow
def test_bench_cuda_compares_the_captured_step_with_the_hand_loop_compiled_by_hand(captured_mlp):
    out = captured_mlp.stdout
    assert "sides: hand loop, accelkit" in out and "accelkit captured, hand compiled" in out, out
    assert "compiled sides: torch.compile()" in out, out  # the CPU's default mode
    for side in ("accelkit captured: ", "hand compiled    : "):
        assert out.count(side) == 2, out  # its time (with its ratio) and its profiled counts
    assert out.count("graph launches") == 4, out
    assert "per step, accelkit captured minus hand compiled: " in out, out


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without an NVIDIA GPU")
def test_bench_cuda_refuses_in_one_sentence_without_a_gpu(prewarmed):
    done = run_benchmark(prewarmed, "bench_cuda.py", timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.strip().startswith("bench_cuda: no NVIDIA GPU is visible") and \
        done.stderr.strip().endswith("--device cpu to check that the script works."), done.stderr
    assert done.stderr.strip().count(". ") == 0, done.stderr  # one sentence


@pytest.mark.slow
def test_bench_ddp_counts_and_compares_a_user_s_ddp_run(prewarmed):
    done = run_benchmark(prewarmed, "bench_ddp.py", "--rounds", "1", "--epochs", "3", "--samples", "512",
                         "--count-steps", "3")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    counts = [line for line in out.splitlines() if "collectives" in line]
    assert len(counts) == 2, out
    # the Trainer adds no collective to DDP's own gradient all-reduce (one bucket: one all-reduce a step)
    per_step = [float(line.split(" aten ops, ")[1].split(" collectives")[0]) for line in counts]
    assert per_step == [1.0, 1.0], counts
    # what else the Trainer's rank does, beyond the counts: DDP's settings (the same as the hand loop's) and the
    # threads of each side, the Trainer's own named with how often they wake
    assert "DistributedDataParallel settings: the same on both sides (bucket_bytes_cap=" in out, out
    assert "the Trainer's own: accelkit-watchdog: its watchdog wakes every 1 s" in out, out
    assert "the launching process wakes every 1 s" in out, out
    assert "side by side" in out and "paired epochs" in out, out
    assert out.count("ratio ddp_spawn / hand loop") == 3 and out.count("CPU time") == 2, out
    # the paired epochs in both orders (epoch 1: the hand loop after the Trainer's epoch; epoch 2: before it)
    assert "pairs with the hand loop before the Trainer epoch: wall " in out, out
    assert "pairs with the hand loop after the Trainer epoch: wall " in out, out


def test_bench_bombs_times_each_refusal_and_says_it_was_the_bounded_parsing_error(prewarmed):
    done = run_benchmark(prewarmed, "bench_bombs.py", "--rounds", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if " ms   median " in line]
    assert [row.split(" first ")[0].strip() for row in rows] == [
        "load_from_checkpoint(hparams_file=)", "CLI --config", "load_from_checkpoint(shared lists)",
        "reference: CLI --config, no aliases"], done.stdout
    assert all(row.endswith("the bounded-parsing error (DataBombError)") for row in rows[:3]), done.stdout
    assert rows[3].endswith("parsed"), done.stdout
    assert "stands for more than 1,000,000 values" in done.stdout, done.stdout
    assert re.search(r"shared\.ckpt 1\d\.\d KiB \(2\*\*60 values\)", done.stdout), done.stdout  # the 19 KB


def test_the_instruction_counter_refuses_a_side_it_saw_nothing_of():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from bench_trainer import OpcodeCounter
    finally:
        sys.path.remove(str(BENCHMARKS))
    counter, previous = OpcodeCounter(), sys.gettrace()
    with pytest.raises(RuntimeError, match=r"saw 0 Python instructions and 0 calls over 5 steps of 'hand loop'"):
        counter.per_step(5, "hand loop")  # a side that ran, whose frames the trace never saw: not "0 per step"
    counter.install()
    counter.counting = True
    sum(len(str(i)) for i in range(10))  # some Python, traced
    counter.counting = False
    sys.settrace(previous)
    instructions, calls = counter.per_step(5, "hand loop")
    assert instructions > 0 and calls > 0


@pytest.mark.slow
def test_bench_cuda_counts_both_sides_after_the_captured_sides_compiled(captured_mlp):
    # the counts come from a fresh process: torch.compile having run in the benchmark's own process (which hid the
    # hand loop's frames from sys.settrace on Python 3.12) changes nothing
    done = captured_mlp
    counts = {line.split(":")[0].strip(): line for line in done.stdout.splitlines()
              if line.endswith(" calls per step")}
    assert set(counts) == {"hand loop", "accelkit"}, done.stdout
    for line in counts.values():
        instructions = int(line.split(": ")[1].split(" Python instructions")[0])
        assert instructions > 1000, line  # the MLP's step alone runs thousands (torch's own Python included)


@pytest.mark.slow
def test_bench_fabric_prints_each_side_s_ratio_to_the_hand_loop_on_one_and_two_processes(prewarmed):
    done = run_benchmark(prewarmed, "bench_fabric.py", "--rounds", "1", "--epochs", "2", "--samples", "256",
                         timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    sides = ["accelkit"] + [side for side in ("lightning", "accelerate") if importlib.util.find_spec(side)]
    for title in ("one process", "2 processes, DDP over gloo"):
        assert f"== {title}: sides: hand loop, {', '.join(sides)}" in out, out
        for side in sides:
            assert f"-- {title}: {side} / hand loop: ratio to the hand loop x" in out, out
        assert re.search(rf"-- {title}: accelkit / hand loop: .* by CPU time x\d\.\d+ .* peak \d+ MiB \(x\d\.\d+\)",
                         out), out
    for side in {"lightning", "accelerate"} - set(sides):
        assert f"{side}: not installed ({side}), its side is skipped" in out, out


@pytest.mark.slow
def test_bench_fabric_counts_instructions_and_collectives_per_step_against_the_hand_loop(prewarmed):
    # accelkit against the hand loop (the other frameworks' loops are run, and their ratios printed, by the test above)
    done = run_benchmark(prewarmed, "bench_fabric.py", "--only", "counts", "--samples", "512", "--sides", "accelkit",
                         timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for title, collectives in (("one process", "0.00"), ("2 processes, DDP over gloo", "1.00")):
        assert f"== counts per step, rank 0, {title}:" in out, out
        # a ratio of instructions, the same collectives on both sides (DDP's one bucket all-reduce per step), memory
        found = re.search(rf"-- counts, {title}: accelkit / hand loop: Python instructions per step x(\d\.\d+) "
                          rf"\(\+?-?\d+\.\d\), collectives per step (\d\.\d\d) -> (\d\.\d\d), peak memory x\d\.\d+",
                          out)
        assert found, out
        assert found.group(2) == found.group(3) == collectives, out
    for side in ("hand loop", "accelkit "):
        assert len(re.findall(rf"  {side}: \d+\.\d Python instructions, \d\.\d\d collectives per step, peak \d+ MiB",
                              out)) == 2, out
    assert out.count("accelkit minus hand loop, by function (the largest): ") == 2 and "accelkit/fabric/" in out, out


@pytest.mark.slow
def test_bench_fabric_ops_compares_operators_threads_and_ddp_options_with_the_hand_loop(prewarmed):
    # 1024 samples: 8 steps an epoch on each of the two processes, so an operator run once an epoch counts 0.125
    done = run_benchmark(prewarmed, "bench_fabric.py", "--only", "ops", "--epochs", "2", "--samples", "1024",
                         "--sides", "accelkit", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "== operators and threads per step, rank 0, 2 processes, DDP over gloo:" in out, out
    sides = {}
    for side in ("hand loop", "accelkit"):
        found = re.search(rf"  {side} *: (\d+\.\d\d) operator calls per step \(\d+ operators\), (\d+) intra-op / "
                          rf"\d+ inter-op threads, \d+ Python threads \(([^)]*)\) \+ \d+ native, CPU per step: "
                          rf"training thread \d+\.\d us, other threads -?\d+\.\d us\n    CPU by thread .*; "
                          rf"garbage collections per step by generation: .*; context switches per step .*; "
                          rf"\d+\.\d C function calls per step\n    DistributedDataParallel: wrapped=(\w+), (.*)\n",
                          out)
        assert found, out
        sides[side] = found
    hand, ours = sides["hand loop"], sides["accelkit"]
    assert hand.group(2) == ours.group(2) == "1", out  # one intra-op thread a process on both sides
    assert "accelkit-watchdog" in ours.group(3) and "accelkit-watchdog" not in hand.group(3), out
    # the same DistributedDataParallel options (accelkit wraps its step router, the hand loop the module)
    # (the router's class is StepRouter's direct-call form until a hook is registered)
    assert hand.group(4) == "Sequential" and ours.group(4).endswith("StepRouter"), out
    assert hand.group(5) == ours.group(5), out
    # the same operators per step: nothing accelkit adds runs every step (at most once an epoch)
    differences = re.search(r"-- ops, accelkit minus hand loop, calls per step: (.*)\n", out)
    assert differences, out
    if differences.group(1) != "none":
        for name, delta in re.findall(r"(\S[^,]*?) ([+-]\d+\.\d+)(?:, |$)", differences.group(1)):
            assert abs(float(delta)) < 0.5, (name, delta, out)
    assert "-- C calls, accelkit minus hand loop, per step: " in out, out


@pytest.mark.slow
def test_bench_fabric_paired_times_the_loops_step_by_step_in_the_same_processes_with_a_control(prewarmed):
    done = run_benchmark(prewarmed, "bench_fabric.py", "--only", "paired", "--paired-epochs", "2", "--samples", "256",
                         "--sides", "accelkit", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # 256 samples, batch 64: 4 steps an epoch on one process, 2 on each of two; 2 timed epochs
    for title, steps in (("one process", 8), ("2 processes, DDP over gloo", 4)):
        assert f"== paired steps in one interpreter per rank, {title}: 2 epochs" in out, out
        for side in ("accelkit", "hand loop again"):  # the framework, and the control: the hand loop against itself
            for clock in ("wall", "CPU"):
                assert re.search(rf"-- paired, {title}: {side} / hand loop by {clock} time x\d\.\d+ \(median steps "
                                 rf"\d+\.\d / \d+\.\d us\); step by step x\d\.\d+, interquartile x\d\.\d+-x\d\.\d+ "
                                 rf"over {steps} steps", out), out
    assert "not measured" not in out, out


def test_bench_fabric_refuses_fewer_than_one_paired_epoch():
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_fabric.py"), "--only", "paired",
                           "--paired-epochs", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--paired-epochs 0: give at least 1" in done.stderr, done.stderr


@pytest.mark.parametrize(("sides", "said"), [
    ("accelkit,flax", "--sides 'accelkit,flax': flax is not a side; give some of accelkit, lightning, accelerate"),
    ("lightning", "--only counts compares accelkit's Fabric with the hand loop: --sides must name accelkit")])
def test_bench_fabric_refuses_sides_it_cannot_compare_naming_them(sides, said):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "bench_fabric.py"), "--only", "counts", "--sides", sides],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and said in done.stderr, done.stderr
