#!/usr/bin/env bash
# Probes on a GPU machine (run through bench/gpu_smoke.sh, which installs the carried wheels):
# how the L2 flush mode bills the timed call (bench.flush_probe), and the ping-pong instances of
# wgmma_sm90 against the libraries on the large shapes. Logs go to $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
python3 -m bench.flush_probe --reps 40 2>&1 | tee "$OUT/flush_probe.log"
mkdir -p /tmp/pp
python3 - <<'PY'
from pathlib import Path
from evo.families import Family
fam = Family.load(Path("templates/wgmma_sm90"))
for name, p in {"pp128x128s6": dict(BM=128, BN=128, PINGPONG=1, STAGES=6),
                "pp64x256s5": dict(BM=64, BN=256, PINGPONG=1, STAGES=5),
                "pp128x128s6np": dict(BM=128, BN=128, PINGPONG=1, STAGES=6, PERSISTENT=0)}.items():
    open(f"/tmp/pp/{name}.cu", "w").write(fam.render(fam.complete(p)).text)
PY
for f in /tmp/pp/*.cu; do
  echo "== $(basename $f)"
  timeout 150 python3 -m evo.evaluate "$f" --shape 4096x4096x1024 --shape 4096x4096x4096 --shape 8192x8192x8192 --shape 1000x904x200 --reps 30 2>&1 | grep -v "^\s*$" | tail -40 | tee -a "$OUT/pingpong.log"
done
