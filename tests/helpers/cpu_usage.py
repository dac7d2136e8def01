"""Where the suite's CPU goes, independently of the machine's load: per test, the CPU seconds of the test's
process and of the processes it started.

Off by default. ``pytest --cpu-usage=FILE`` (or ``ACCELKIT_TEST_CPU_USAGE=FILE``) appends one JSON line per test
to ``FILE``: its node id, file, markers, the user + system CPU seconds of the test's process (set-up, call and
tear-down together: a module-scoped fixture counts in the test that first uses it), those of the children it
reaped (``os.times``: spawned workers, subprocesses, everything they reaped in turn), those of the programs the
``prewarmed`` fixture forked for it (reaped by the forking interpreter, so reported by it: see
``helpers.prewarmed``), and what it started: subprocesses by program, ``multiprocessing`` processes.

Run it where one test runs at a time, so that a test's children are its own (``-n 0`` or ``-n 1``), e.g.
``pytest -m slow -n 1 --cpu-usage=/tmp/cpu.jsonl``; then ``python tests/helpers/cpu_usage.py /tmp/cpu.jsonl``
summarizes by file, by kind and the costliest tests (two files: before and after, side by side by file).

Processes a test leaves running (never reaped) are not counted, nor the CPU of the pytest controller.
"""

from __future__ import annotations

import json
import multiprocessing.process
import os
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

VARIABLE = "ACCELKIT_TEST_CPU_USAGE"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-usage", metavar="FILE", default=None,
                     help=f"append each test's CPU seconds (its process and its children) to FILE as JSON lines "
                          f"(also ${VARIABLE}); summarize with `python tests/helpers/cpu_usage.py FILE`")


def program_kind(argv: Any) -> str:
    """What a subprocess is, for the summary: ``pip``, ``build``, ``sphinx``, ``torchrun``, ``accelkit``,
    ``python`` (another Python program) or its executable's name."""
    words = [str(a) for a in argv] if isinstance(argv, (list, tuple)) else str(argv).split()
    if not words:
        return "?"
    names = [os.path.basename(w) for w in words[:4]]
    for kind in ("pip", "build", "sphinx-build", "sphinx", "torchrun", "accelkit", "mypy", "ruff", "git"):
        if kind in names or any(n.startswith(kind + ".") for n in names):
            return kind
    if names[0].startswith("python") or words[0] == sys.executable:
        return "python"
    return names[0]


class Recorder:
    """Counts what the current test starts (subprocesses by :func:`program_kind`, ``multiprocessing`` processes)."""

    def __init__(self) -> None:
        self.started: Counter[str] = Counter()
        self.popen_init = subprocess.Popen.__init__
        self.process_start = multiprocessing.process.BaseProcess.start

    def install(self) -> None:
        recorder, popen_init, process_start = self, self.popen_init, self.process_start

        def counting_init(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
            recorder.started[program_kind(args)] += 1
            popen_init(popen, args, *rest, **kwargs)

        def counting_start(process: multiprocessing.process.BaseProcess) -> None:
            recorder.started["multiprocessing"] += 1
            process_start(process)

        subprocess.Popen.__init__ = counting_init  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = counting_start  # type: ignore[method-assign]

    def uninstall(self) -> None:
        subprocess.Popen.__init__ = self.popen_init  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = self.process_start  # type: ignore[method-assign]


def _target(config: pytest.Config) -> str | None:
    return config.getoption("--cpu-usage") or os.environ.get(VARIABLE) or None


def pytest_configure(config: pytest.Config) -> None:
    if _target(config):
        recorder = Recorder()
        recorder.install()
        config.stash[RECORDER] = recorder


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.stash.get(RECORDER, None)
    if recorder is not None:
        recorder.uninstall()


RECORDER = pytest.StashKey[Recorder]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    target = _target(item.config)
    recorder = item.config.stash.get(RECORDER, None)
    if not target or recorder is None:
        yield
        return
    from helpers import prewarmed  # here: the summary runs as a script, without helpers on the path

    recorder.started.clear()
    before, forked_before = os.times(), prewarmed.forked_cpu_seconds()
    yield
    after, forked_after = os.times(), prewarmed.forked_cpu_seconds()
    record = {
        "nodeid": item.nodeid, "file": item.nodeid.split("::", 1)[0],
        "markers": sorted({m.name for m in item.iter_markers()} & {"slow", "xla", "gpu"}),
        "self": round(after.user + after.system - before.user - before.system, 3),
        "children": round(after.children_user + after.children_system
                          - before.children_user - before.children_system, 3),
        "prewarmed": round(forked_after - forked_before, 3),
        "started": dict(recorder.started),
    }
    with open(target, "a") as out:
        out.write(json.dumps(record) + "\n")


# -- the summary -------------------------------------------------------------------------------------------------

def total(record: dict[str, Any]) -> float:
    """A test's CPU seconds: its process, its reaped children and its prewarmed programs."""
    return float(record["self"] + record["children"] + record["prewarmed"])


def kind(record: dict[str, Any]) -> str:
    """The test's dominant cost, by what it started: builds and installs, C++ compiles, XLA, several processes,
    interpreters."""
    started = record["started"]
    if started.get("pip") or started.get("build"):
        return "pip builds/installs"
    if started.get("sphinx-build") or started.get("sphinx"):
        return "sphinx builds"
    if any(started.get(k) for k in ("g++", "gcc", "cc", "c++", "clang")):
        return "C++ compiles (torch.compile's inductor)"
    if "xla" in record["markers"]:
        return "XLA (compiles in subprocesses)"
    if started.get("multiprocessing") or started.get("torchrun"):
        return "several processes (spawn, torchrun)"
    if any(started.get(k) for k in ("python", "accelkit", "mypy", "ruff")):
        return "interpreter starts"
    if record["prewarmed"] > 0:
        return "prewarmed programs"
    return "in the test's process"


def load(path: str) -> list[dict[str, Any]]:
    """The records of a ``--cpu-usage`` file (the last record of a test run twice)."""
    records = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["nodeid"]] = record
    return list(records.values())


def by(records: list[dict[str, Any]], key: Any) -> dict[str, float]:
    sums: defaultdict[str, float] = defaultdict(float)
    for record in records:
        sums[key(record)] += total(record)
    return dict(sums)


def summarize(path: str, top: int = 25) -> str:
    """Totals by kind and by file, and the ``top`` costliest tests, of one file."""
    records = load(path)
    grand = sum(total(r) for r in records)
    lines = [f"{len(records)} tests, {grand:.0f} CPU s (self {sum(r['self'] for r in records):.0f}, children "
             f"{sum(r['children'] for r in records):.0f}, prewarmed {sum(r['prewarmed'] for r in records):.0f})",
             "", "by kind:"]
    started: Counter[str] = Counter()
    for record in records:
        started.update(record["started"])
    for name, seconds in sorted(by(records, kind).items(), key=lambda kv: -kv[1]):
        lines.append(f"  {seconds:8.0f}  {100 * seconds / grand:5.1f}%  {name}")
    lines += ["", "processes started: " + ", ".join(f"{k} {n}" for k, n in started.most_common()), "", "by file:"]
    for name, seconds in sorted(by(records, lambda r: r["file"]).items(), key=lambda kv: -kv[1]):
        lines.append(f"  {seconds:8.0f}  {100 * seconds / grand:5.1f}%  {name}")
    lines += ["", f"top {top} tests:"]
    for record in sorted(records, key=total, reverse=True)[:top]:
        lines.append(f"  {total(record):8.1f}  {record['nodeid']}")
    return "\n".join(lines)


def compare(before_path: str, after_path: str) -> str:
    """By file, for the files in both runs, the CPU seconds and the number of their tests, before and after (all of a
    file's tests: a test renamed or added still counts in its file)."""
    before, after = load(before_path), load(after_path)
    files = sorted({r["file"] for r in before} & {r["file"] for r in after})
    lines = [f"{len(files)} files in both runs", f"  {'before':>13}  {'after':>13}  file"]
    sums = [0.0, 0.0]
    for name in files:
        b = [total(r) for r in before if r["file"] == name]
        a = [total(r) for r in after if r["file"] == name]
        sums[0] += sum(b)
        sums[1] += sum(a)
        lines.append(f"  {sum(b):6.0f} ({len(b):3d})  {sum(a):6.0f} ({len(a):3d})  {name}")
    lines.append(f"  {sums[0]:12.0f}  {sums[1]:12.0f}  total ({100 * sums[1] / sums[0] if sums[0] else 0:.0f}%)")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) == 2:
        print(summarize(sys.argv[1]))
    elif len(sys.argv) == 3:
        print(compare(sys.argv[1], sys.argv[2]))
    else:
        sys.exit("usage: python tests/helpers/cpu_usage.py FILE [AFTER_FILE]")
