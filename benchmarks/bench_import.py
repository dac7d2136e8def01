"""Start-up cost of accelkit: ``import accelkit`` plus plugin discovery, next to ``import torch`` alone.

Each sample is a fresh interpreter (nothing cached in ``sys.modules``), timed from inside with
``time.perf_counter`` around the imports, so interpreter start-up is not counted. The two sides alternate,
sample by sample. accelkit imports torch itself, so the difference is what accelkit adds:
its own modules, pluggy, entry-point discovery, importing every installed plugin's entry-point module and
building the registry. A third snippet times the same work after ``import torch`` in one process, which
measures the addition directly and is much less noisy on a loaded machine. Target: <= 0.15 s.

    .venv/bin/python benchmarks/bench_import.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

TORCH = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
ACCELKIT = (
    "import time, warnings; warnings.simplefilter('ignore'); t = time.perf_counter(); import accelkit; "
    "from accelkit.plugins.manager import PluginManager; registry = PluginManager().registry; "
    "print(time.perf_counter() - t)"
)
EXTRA = (
    "import warnings; warnings.simplefilter('ignore'); import torch, time; t = time.perf_counter(); "
    "import accelkit; from accelkit.plugins.manager import PluginManager; registry = PluginManager().registry; "
    "print(time.perf_counter() - t)"
)
PLUGINS = (
    "import warnings; warnings.simplefilter('ignore'); from accelkit.plugins.manager import PluginManager; "
    "m = PluginManager(); r = m.registry; "
    "print(sorted(r.accelerators), sorted(r.strategies)[:6], "
    "sorted(k for k in __import__('sys').modules if k.split('.')[0] in ('torch_xla', 'jax')))"
)


ENV = dict(os.environ)


def sample(code: str) -> float:
    """Seconds the snippet reports, in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=ENV).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    """Alternate the two sides ``--repeat`` times; print medians and the difference."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--no-bytecode", action="store_true",
                        help="keep PYTHONDONTWRITEBYTECODE if set (accelkit's modules are then compiled on every "
                             "import, unlike torch's, which pip compiled at install time)")
    args = parser.parse_args()
    if not args.no_bytecode:
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # as after a normal install: .pyc files are cached
    print(f"bytecode cache for accelkit's sources: {'off' if ENV.get('PYTHONDONTWRITEBYTECODE') else 'on'}")
    what = subprocess.run([sys.executable, "-c", PLUGINS], capture_output=True, text=True, check=True).stdout
    print(f"registry (accelerators, first strategies, heavy modules imported): {what.strip()}")
    sample(TORCH)  # warm the file-system cache for both sides
    sample(ACCELKIT)
    torch_times, accelkit_times, extra_times = [], [], []
    for _ in range(args.repeat):
        torch_times.append(sample(TORCH))
        accelkit_times.append(sample(ACCELKIT))
        extra_times.append(sample(EXTRA))
    t, a = statistics.median(torch_times), statistics.median(accelkit_times)
    pairs = statistics.median(x - y for x, y in zip(accelkit_times, torch_times, strict=True))
    print(f"import torch                               : median {t:.3f} s  "
          f"({', '.join(f'{v:.3f}' for v in torch_times)})")
    print(f"import accelkit + PluginManager().registry : median {a:.3f} s  "
          f"({', '.join(f'{v:.3f}' for v in accelkit_times)})")
    print(f"difference of medians: {a - t:+.3f} s; median of paired differences: {pairs:+.3f} s")
    print(f"accelkit + registry after torch is imported (same process): median {statistics.median(extra_times):.3f} s "
          f"({', '.join(f'{v:.3f}' for v in extra_times)})")
    print("target: <= 0.15 s more than import torch")


if __name__ == "__main__":
    main()
