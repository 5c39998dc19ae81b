#!/usr/bin/env bash
# Issue 3, first GPU call of a session: how the L2 flush mode bills the timed call, the ping-pong
# instances of wgmma_sm90 against the libraries on the large shapes, the sanitizer on a wgmma kernel.
# Run through bench/gpu_smoke.sh (installs the carried wheels). Logs go to $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
python3 -m bench.flush_probe --reps 40 2>&1 | tee "$OUT/flush_probe.log"
mkdir -p /tmp/pp
python3 - <<'PY'
from evo.families import Family
from pathlib import Path
fam = Family.load(Path("templates/wgmma_sm90"))
for name, p in {"pp128x128s6": dict(BM=128, BN=128, PINGPONG=1, STAGES=6),
                "pp128x128s6g16": dict(BM=128, BN=128, PINGPONG=1, STAGES=6, GROUP=16),
                "pp64x256s5": dict(BM=64, BN=256, PINGPONG=1, STAGES=5),
                "coop128x256s4": dict(BM=128, BN=256, STAGES=4)}.items():
    open(f"/tmp/pp/{name}.cu", "w").write(fam.render(fam.complete(p)).text)
PY
for f in /tmp/pp/*.cu; do
  echo "== $(basename $f)"
  timeout 150 python3 -m evo.evaluate "$f" --shape 4096x4096x1024 --shape 4096x4096x4096 --shape 8192x8192x8192 --reps 30 2>&1 | grep -v "^\s*$" | tee -a "$OUT/pingpong.log"
done
echo "== sanitizer on a wgmma_sm90 kernel"
timeout 240 python3 -m evo.sanitize kernels_out/NVIDIA_H200/TN/4096x4096x4096.cu --shape 256x256x512 2>&1 | tail -25 | tee "$OUT/sanitize.log"
