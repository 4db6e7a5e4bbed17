#!/bin/bash
# One device call: environment facts, resource usage, GPU correctness tests, benchmark.
# Usage on the device machine (repo root): bash plugins/dcnv2/devrun.sh [--quick]
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/dcnv2-out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/env.txt"
python3 -c "import cupy, torch, torchvision; print('cupy', cupy.__version__, 'torch', torch.__version__, 'tv', torchvision.__version__)" | tee -a "$OUT/env.txt"
nvcc --version | tail -1 | tee -a "$OUT/env.txt"
ptxas -arch=sm_90 -v trtconv/trt/plugins/dcnv2.ptx -o /tmp/dcnv2.cubin 2>&1 | grep -E "Used|spill" > "$OUT/resources.txt"
ptxas -arch=sm_90a -v trtconv/trt/plugins/dcnv2_sm90a.ptx -o /tmp/dcnv2_sm90a.cubin 2>&1 | grep -E "Used|spill" >> "$OUT/resources.txt"
python3 -m pytest -q -p no:cacheprovider --maxfail=25 tests/trt/test_dcnv2_gpu.py 2>&1 | tee "$OUT/pytest.log" | tail -25
python3 benchmarks/dcn_bench.py --json "$OUT/bench.json" "$@" 2>&1 | tee "$OUT/bench.log" | grep -v '^{'
