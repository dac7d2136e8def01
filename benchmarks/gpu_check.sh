#!/bin/bash
# The GPU checks of issue 24 in one device call (about 6 minutes on an H100 with 16 cores), from the repository
# root of a checkout carrying .device-kit (bash ../shared/gpu/prepare.sh), run through the kit's installer:
#   bash .device-kit/on_device.sh bash benchmarks/gpu_check.sh
# 1. the tiny step, 9 rounds: wall and host-CPU ratios to the hand loop, the operators accelkit adds (explained),
#    the Python per step and the host time by function (cProfile, CUDA calls included);
# 2. the whole suite over 16 workers;
# 3. the captured step and the hand-compiled loop beside the eager sides, both workloads.
# Logs go to $OUT (the device tool brings them back), else .device-kit/out.
O=${OUT:-.device-kit/out}; mkdir -p "$O"
export PYTHONUNBUFFERED=1
python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__)"
echo "== bench mlp, 9 rounds ($(date +%T))"
timeout 150 python3 benchmarks/bench_cuda.py --workloads mlp --rounds 9 > "$O/bench_mlp9.log" 2>&1; echo "rc=$?"
tail -40 "$O/bench_mlp9.log"
echo "== suite ($(date +%T))"
timeout 230 python3 -m pytest -p no:cacheprovider -q -rfEs -n 16 > "$O/suite.log" 2>&1; echo "rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -30
echo "== captured, both workloads ($(date +%T))"
timeout 150 python3 benchmarks/bench_cuda.py --captured --workloads mlp transformer --rounds 3 --steps 200 \
  > "$O/bench_captured.log" 2>&1; echo "rc=$?"
tail -40 "$O/bench_captured.log"
echo "== end ($(date +%T))"
