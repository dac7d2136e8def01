"""The run's state and progress (``accelkit.loops.state``), tested on their own: no Trainer, no fit."""

from __future__ import annotations

import ast
import copy
import dataclasses
import pickle
from pathlib import Path

import pytest
import torch

from accelkit.loops.metrics import MetricStore
from accelkit.loops.state import (
    BATCH_COUNTS,
    CARRIED_FIELDS,
    Lifecycle,
    Progress,
    RunState,
    TrainerState,
    fields_where,
    lifecycle,
)
from accelkit.strategies.launchers.result import WorkerResult

ROOT = Path(__file__).resolve().parents[2]


def _non_default(name: str, value: object) -> object:
    """A value unlike the field's default (the default's type where it matters)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 7
    if isinstance(value, list):
        return [3, None]
    if isinstance(value, dict):
        return {f"{name}/stale": 1.0}
    if isinstance(value, TrainerState):
        return TrainerState(fn="fit", stage="validate")
    if isinstance(value, MetricStore):
        return MetricStore()
    return object()  # None or an object: a sentinel


# ------------------------------------------------------------------------------------------------- Progress
def test_advance_step_and_epoch_are_the_counters_writers() -> None:
    progress = Progress()
    for _ in range(3):
        progress.advance_step()
    progress.epoch_training_done = True
    progress.advance_epoch()
    assert (progress.current_epoch, progress.global_step) == (1, 3)
    assert progress.epoch_training_done is False  # the next epoch starts with none of its batches done


def test_state_dict_round_trip() -> None:
    progress = Progress(current_epoch=4, global_step=37)
    restored = Progress()
    restored.load_state_dict(progress.state_dict())
    assert (restored.current_epoch, restored.global_step) == (4, 37)
    assert progress.state_dict() == {"epoch": 4, "global_step": 37, "resume_epoch": 4, "batches_that_stepped": 0}


def test_the_batches_that_stepped_round_trip_and_give_the_loggers_step() -> None:
    """The running batch counts in ``batches_that_stepped`` from its step on, so a checkpoint written from its
    hooks (on_train_batch_end, its validation) resumes the loggers at the next step, while the loggers' step within
    it is the count before it (Lightning's); a record without the count (an older checkpoint, Lightning's) takes
    one batch per optimizer step."""
    progress = Progress(global_step=9, batches_that_stepped=6, stepping=True)
    assert progress.logger_step() == 5
    restored = Progress()
    restored.load_state_dict(progress.state_dict())
    assert (restored.batches_that_stepped, restored.logger_step()) == (6, 6)
    progress.advance_epoch()
    assert progress.logger_step() == 6
    restored.load_state_dict({"epoch": 1, "global_step": 9})
    assert restored.batches_that_stepped == 9


def test_a_checkpoint_after_the_epochs_batches_resumes_at_the_next_epoch() -> None:
    progress = Progress(current_epoch=2, global_step=10, epoch_training_done=True)
    state = progress.state_dict()
    assert (state["epoch"], state["resume_epoch"]) == (2, 3)
    restored = Progress(epoch_training_done=True)
    restored.load_state_dict(state)
    assert (restored.current_epoch, restored.global_step, restored.epoch_training_done) == (3, 10, False)


def test_restore_without_resume_epoch_continues_the_named_epoch() -> None:
    progress = Progress()
    progress.load_state_dict({"epoch": 5, "global_step": "12"})  # a Lightning checkpoint's entries
    assert (progress.current_epoch, progress.global_step) == (5, 12)


def test_restore_names_the_missing_entry() -> None:
    with pytest.raises(KeyError, match="'global_step'"):
        Progress().load_state_dict({"epoch": 1})


def test_accumulation_boundaries_end_each_window_and_the_epoch() -> None:
    progress = Progress()
    steps = []
    for batch_idx in range(7):  # 7 batches, windows of 3: steps after batches 2, 5 and the last (6)
        progress.is_last_batch = batch_idx == 6
        steps.append(progress.accumulation_boundary(batch_idx, 3))
    assert [i for i, step in enumerate(steps) if step] == [2, 5, 6]
    assert all(Progress().accumulation_boundary(i, 1) for i in range(3))


def test_continued_keeps_the_counters_and_nothing_else() -> None:
    """The counters and the latest fit's batch counts (read outside a fit, as Lightning's) go on; nothing else."""
    progress = Progress(**{f.name: _non_default(f.name, f.default if f.default is not dataclasses.MISSING
                                                else f.default_factory())
                           for f in dataclasses.fields(Progress)})
    nxt = progress.continued()
    fresh = Progress()
    for item in dataclasses.fields(Progress):
        expected = getattr(progress, item.name) if item.name in ("current_epoch", "global_step",
                                                                 "batches_that_stepped", "last_fit_batches") \
            else getattr(fresh, item.name)
        assert getattr(nxt, item.name) == expected, item.name


def test_a_training_batch_is_counted_by_one_method() -> None:
    """``count_batch`` is where ``batches_that_stepped`` grows (a stepping batch at once, before its step);
    ``begin_batch`` sets the last-batch flag, which holds until it is set again."""
    progress = Progress()
    progress.begin_batch(is_last=False)
    assert (progress.is_last_batch, progress.stepping, progress.batches_that_stepped) == (False, False, 0)
    progress.count_batch(False)  # inside an accumulation window
    progress.count_batch(True)
    assert (progress.stepping, progress.batches_that_stepped, progress.logger_step()) == (True, 1, 0)
    progress.begin_batch(is_last=True)
    progress.count_batch(True)
    assert (progress.is_last_batch, progress.stepping, progress.batches_that_stepped) == (True, True, 2)
    progress.count_batch(True)  # the flag is not the count's
    assert (progress.is_last_batch, progress.batches_that_stepped) == (True, 3)


def test_the_epochs_training_is_done_until_the_epoch_advances() -> None:
    progress = Progress(current_epoch=1)
    progress.finish_epoch_training()
    assert progress.state_dict()["resume_epoch"] == 2  # a checkpoint from here resumes at the next epoch
    progress.advance_epoch()
    assert (progress.current_epoch, progress.epoch_training_done) == (2, False)
    assert progress.state_dict()["resume_epoch"] == 2


def test_batch_counts_are_recorded_per_stage_and_kept_for_after_the_fit() -> None:
    progress = Progress()
    for stage, name in BATCH_COUNTS.items():
        progress.record_batches(stage, 5 if stage == "train" else (3, None))
        assert getattr(progress, name) == (5 if stage == "train" else [3, None]), stage
    progress.end_fit()
    assert progress.last_fit_batches == (5, [3, None])
    with pytest.raises(ValueError, match=r"unknown stage 'val'; use one of \['predict', 'sanity_check', 'test', "
                                         r"'train', 'validate'\]"):
        progress.record_batches("val", [1])


#: the Trainer's Lightning setters of progress flags: their public API, the only writers outside loops/state.py
LIGHTNING_SETTERS = {("core/src/accelkit/trainer/properties.py", "should_stop"),
                     ("core/src/accelkit/trainer/properties.py", "sanity_checking")}


def progress_writes(files: list[Path]) -> list[str]:
    """``path:line: target`` of every assignment to a :class:`Progress` field outside loops/state.py (an attribute of
    that name on anything but ``self``, or ``setattr`` on a progress record)."""
    names = {item.name for item in dataclasses.fields(Progress)}
    found = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        if rel == "core/src/accelkit/loops/state.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Attribute) and sub.attr in names and \
                            ast.unparse(sub.value).endswith("progress") and (rel, sub.attr) not in LIGHTNING_SETTERS:
                        found.append(f"{rel}:{node.lineno}: {ast.unparse(sub)}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and \
                    node.args and ast.unparse(node.args[0]).endswith("progress"):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_progress_field_is_written_by_a_method_of_progress() -> None:
    files = sorted((ROOT / "core" / "src").rglob("*.py")) + sorted((ROOT / "plugins").glob("*/src/**/*.py"))
    assert len(files) > 100
    assert progress_writes(files) == []


def test_the_progress_write_check_sees_writes(tmp_path: Path) -> None:
    folder = ROOT / "tests" / "loops"
    source = ("def f(trainer, progress):\n    trainer.run_state.progress.epoch_training_done = True\n"
              "    progress.batches_that_stepped += 1\n    setattr(trainer.run_state.progress, 'num_val_batches', [])\n"
              "    trainer.should_stop = True\n    progress.count_batch(True)\n")
    probe = folder / f"_probe_{tmp_path.name}.py"  # (inside the repository: the check names paths from its root)
    probe.write_text(source)
    try:
        found = progress_writes([probe])
    finally:
        probe.unlink()
    rel = probe.relative_to(ROOT).as_posix()
    assert found == [f"{rel}:2: trainer.run_state.progress.epoch_training_done",
                     f"{rel}:3: progress.batches_that_stepped",
                     f"{rel}:4: setattr(trainer.run_state.progress, 'num_val_batches', [])"]


# ------------------------------------------------------------------------------------------------- RunState
def _stale_run_state() -> RunState:
    """A run state whose every field differs from a fresh one's."""
    run = RunState()
    for item in dataclasses.fields(RunState):
        setattr(run, item.name, _non_default(item.name, getattr(run, item.name)))
    run.progress = Progress(current_epoch=3, global_step=30, should_stop=True, is_last_batch=True,
                            num_val_batches=[4])
    return run


def test_begin_keeps_no_field_of_the_previous_run() -> None:
    run = _stale_run_state()
    before = {item.name: getattr(run, item.name) for item in dataclasses.fields(RunState)}
    module, datamodule = object(), object()
    run.begin(module, datamodule, "last.ckpt")  # type: ignore[arg-type]
    fresh = RunState()
    for item in dataclasses.fields(RunState):
        now = getattr(run, item.name)
        if item.name in ("module", "datamodule", "ckpt_path"):
            continue
        if item.name == "progress":
            assert now is not before["progress"]
            assert (now.current_epoch, now.global_step) == (3, 30)  # the counters go on
            assert (now.should_stop, now.is_last_batch, now.num_val_batches) == (False, False, [])
        elif item.name in CARRIED_FIELDS:
            assert now is before[item.name], item.name
        elif item.name == "metrics":
            assert isinstance(now, MetricStore) and now is not before["metrics"]
        else:
            assert now == getattr(fresh, item.name), f"{item.name} survived RunState.begin"
    assert (run.module, run.datamodule, run.ckpt_path) == (module, datamodule, "last.ckpt")


def test_apply_worker_result_takes_the_whole_outcome() -> None:
    run = RunState(optimizers=[object()])  # type: ignore[list-item]  # (building an optimizer costs seconds)
    result = WorkerResult(state_dict={"w": torch.zeros(1)}, training_state={"optimizer_states": [{}]},
                          callback_metrics={"loss": torch.tensor(1.0)}, logged_metrics={"loss": torch.tensor(1.0)},
                          progress_bar_metrics={"loss": 1.0}, current_epoch=2, global_step=8, should_stop=True,
                          stop_reason="max_epochs=2 reached", batches_that_stepped=4)
    run.apply_worker_result(result)
    assert (run.progress.current_epoch, run.progress.global_step, run.progress.should_stop) == (2, 8, True)
    assert run.progress.batches_that_stepped == 4  # (two optimizer steps a batch): a later test logs at step 4
    assert run.callback_metrics is result.callback_metrics and run.progress_bar_metrics == {"loss": 1.0}
    assert run.optimizers == [] and run.worker_training_state == {"optimizer_states": [{}]}
    assert run.stop_reason == "max_epochs=2 reached"


def test_snapshot_and_restore_put_the_progress_and_metrics_back() -> None:
    hooks = object()
    run = RunState(progress=Progress(current_epoch=1, global_step=5), callback_metrics={"a": 1},
                   hooks=hooks)  # type: ignore[arg-type]
    saved = run.snapshot()
    assert saved.hooks is hooks  # the loop objects are shared, not left out as for a spawned worker
    run.begin(object())  # type: ignore[arg-type]  # a trial
    trial_progress = run.progress  # what a running loop holds
    run.progress.load_state_dict({"epoch": 0, "global_step": 0})
    run.progress.advance_step()
    run.callback_metrics["b"] = 2
    run.state.fn = "fit"
    run.restore(saved)
    assert run.progress is trial_progress and (run.progress.current_epoch, run.progress.global_step) == (1, 5)
    assert run.callback_metrics == {"a": 1} and run.state.fn is None and run.hooks is hooks


def test_a_spawned_worker_gets_no_loop_objects() -> None:
    run = RunState(hooks=object(), fit_loop=object(), progress=Progress(global_step=4))  # type: ignore[arg-type]
    copied = pickle.loads(pickle.dumps(run))
    assert copied.hooks is None and copied.fit_loop is None and copied.progress.global_step == 4


#: the fields of a WorkerResult that are not fields of the run state (what only a worker's end knows)
WORKER_ONLY = {"result", "state_dict", "training_state", "callback_states", "interrupted"}


def test_a_field_declares_its_lifecycle_once_and_every_copy_follows_it() -> None:
    """Walks the fields of RunState: begin keeps exactly the carried ones, pickling to a worker drops exactly the
    ones not sent, a snapshot shares, copies or deep-copies each as declared, and restore puts each back."""
    run = _stale_run_state()
    run.metrics = MetricStore()
    before = {item.name: getattr(run, item.name) for item in dataclasses.fields(RunState)}
    saved = run.snapshot()
    pickled = pickle.loads(pickle.dumps(RunState(**{name: value for name, value in before.items()
                                                    if isinstance(value, (dict, list, int, str, Progress,
                                                                          TrainerState))})))
    declared = {item.name: lifecycle(item) for item in dataclasses.fields(RunState)}
    for name, life in declared.items():
        value, kept = before[name], getattr(saved, name)
        if life.snapshot == "shared":
            assert kept is value, name
        elif life.snapshot == "copied":
            assert kept is not value and kept == value, name
        else:
            assert kept is not value and dataclasses.asdict(kept) == dataclasses.asdict(value), name
        if not life.to_workers:
            assert RunState(**{name: object()}).__getstate__()[name] is None, name
        elif isinstance(value, (dict, list, int, str)):
            assert getattr(pickled, name) == value, name
    assert set(CARRIED_FIELDS) == {name for name, life in declared.items() if life.carried}
    progress = run.progress
    run.begin(object())  # type: ignore[arg-type]
    for name, life in declared.items():
        if name == "progress":
            assert [f.name for f in dataclasses.fields(Progress) if lifecycle(f).carried] == \
                ["current_epoch", "global_step", "batches_that_stepped", "last_fit_batches"]
        elif life.carried:
            assert getattr(run, name) is before[name], name
    run.restore(saved)
    assert run.progress is not progress  # (begin made a new record; restore fills the live one in place)
    for name, life in declared.items():
        now, kept = getattr(run, name), getattr(saved, name)
        assert (dataclasses.asdict(now) == dataclasses.asdict(kept)) if life.snapshot == "deep" else now is kept, name


def test_the_fields_a_worker_returns_are_the_worker_results_fields() -> None:
    """Every field declared ``returned`` (of RunState and of Progress) is a field of WorkerResult, and every other
    field of WorkerResult is one only a worker's end knows; a worker's outcome goes through a WorkerResult into a
    caller's run state unchanged."""
    returned = fields_where(RunState, returned=True) + fields_where(Progress, returned=True)
    assert {item.name for item in dataclasses.fields(WorkerResult)} == set(returned) | WORKER_ONLY
    worker = _stale_run_state()
    worker.metrics = MetricStore()
    worker.stop_reason = "max_steps=3 reached"
    outcome = worker.outcome()
    assert set(outcome) == set(returned)
    caller = RunState()
    caller.apply_worker_result(WorkerResult(**copy.deepcopy(outcome)))
    assert caller.outcome() == outcome
    assert (caller.progress.current_epoch, caller.progress.global_step, caller.progress.should_stop) == (3, 30, True)


def test_a_lifecycle_names_its_bad_snapshot_value() -> None:
    with pytest.raises(ValueError, match="Lifecycle\\(snapshot='deepest'\\): use 'shared', 'copied' or 'deep'"):
        Lifecycle(snapshot="deepest")
