#!/bin/bash
# Nsight Compute on the device machine: one launch per config in profile_one.py
# (arguments, e.g. float16:64,64,64,2, replace its default configs).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/dcnv2-out}; mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || ls /usr/local/cuda/bin/ncu)
echo "ncu: $NCU"
"$NCU" --clock-control none -k regex:dcnv2 --section SpeedOfLight --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section ComputeWorkloadAnalysis \
  --section InstructionStats python3 plugins/dcnv2/profile_one.py "$@" > "$OUT/ncu.txt" 2>&1
grep -E "dcnv2_|Duration|Throughput|Pipe|Stall|Warp Cycles|Issued|Eligible|Active Warps|Achieved|L1/TEX Hit|L2 Hit|Registers|Block Limit|Executed Ipc|One or More|No Eligible|Mem Busy|Max Bandwidth|smsp__pcsamp|Bank" "$OUT/ncu.txt" | head -120
python3 -c "
from trtconv.trt.plugins import dcnv2_kernel as k
open('/tmp/one.ptx','w').write(k.entry_ptx(k.kernel_name('float16',(64,128,32,0),True,'nhwc')))"
ptxas -arch=sm_90 /tmp/one.ptx -o /tmp/one.cubin && cuobjdump -sass /tmp/one.cubin > "$OUT/f16_nhwc_m64n128k32.sass"
grep -oE "^\s+/\*[0-9a-f]+\*/\s+[@!A-Z0-9P]*\s*[A-Z][A-Z0-9]*(\.[A-Z0-9_]+)*" "$OUT/f16_nhwc_m64n128k32.sass" | awk '{print $NF}' | sed -E 's/\..*//' | sort | uniq -c | sort -rn | head -30
