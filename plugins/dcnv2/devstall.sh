#!/bin/bash
# Stall sampling per SASS instruction for one config (development only).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || ls /usr/local/cuda/bin/ncu)
for CFG in "$@"; do
  tag=$(echo "$CFG" | tr ':,' '__')
  "$NCU" --clock-control none -k regex:dcnv2 --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    -o "$OUT/$tag" -f python3 plugins/dcnv2/profile_one.py "$CFG" > /dev/null 2>&1
  "$NCU" --import "$OUT/$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/$tag.sass.csv" 2>&1
  "$NCU" --import "$OUT/$tag.ncu-rep" --page raw --csv > "$OUT/$tag.raw.csv" 2>&1
  ls -la "$OUT"
done
