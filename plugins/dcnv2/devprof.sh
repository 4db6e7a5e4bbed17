#!/bin/bash
# Nsight Compute on the device machine: one launch per config in profile_one.py
# (arguments, e.g. float16:128,256,32,3, replace its default configs), then the SASS opcode
# histogram of the first config's NHWC entry.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/dcnv2-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || ls /usr/local/cuda/bin/ncu)
echo "ncu: $NCU"
"$NCU" --clock-control none -k regex:dcnv2 --section SpeedOfLight --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section LaunchStats --section Occupancy \
  --section ComputeWorkloadAnalysis --section InstructionStats python3 plugins/dcnv2/profile_one.py "$@" > "$OUT/ncu.txt" 2>&1
grep -E "dcnv2_|Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|Active Warps|Achieved|L1/TEX Hit|L2 Hit|Registers|Block Limit|Executed Ipc|One or More|No Eligible|Mem Busy|Max Bandwidth|smsp__pcsamp|Bank|Shared" "$OUT/ncu.txt" | head -150
CFG=${1:-float16:64,128,32,0}
python3 -c "
import sys
from trtconv.trt.plugins import dcnv2_kernel as k
dt, t = sys.argv[1].split(":")[:2]; tile = tuple(int(v) for v in t.split(','))
name = k.kernel_name(dt, tile, True, 'nhwc')
open('/tmp/one.ptx', 'w').write(k.entry_ptx(name)); print(name, k.ptx_file(name))" "$CFG" > /tmp/one.txt
ARCH=$(grep -q sm90a /tmp/one.txt && echo sm_90a || echo sm_90)
ptxas -arch=$ARCH /tmp/one.ptx -o /tmp/one.cubin && cuobjdump -sass /tmp/one.cubin > "$OUT/one.sass"
grep -oE "^\s+/\*[0-9a-f]+\*/\s+[@!A-Z0-9P]*\s*[A-Z][A-Z0-9]*(\.[A-Z0-9_]+)*" "$OUT/one.sass" | awk '{print $NF}' | sed -E 's/\..*//' | sort | uniq -c | sort -rn | head -30
