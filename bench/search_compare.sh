#!/usr/bin/env bash
# On a GPU machine (through bench/gpu_smoke.sh): search each shape of a shape set, then the side-by-side
# benchmark of the set.   bash bench/search_compare.sh shapes/decode.yaml [families]
# Environment: BUDGET (minutes per shape, 1), ONLY (space-separated shapes to search, default all),
# COMPARE=0 (skip the benchmark), CONFIG (a YAML passed to the searches and the benchmark), OUT (where logs, the archive and the tables go). A carried .evo/evo.db.gz
# is unpacked first and the archive is packed back into $OUT after every shape (nothing lost on a kill): as
# evo.db.gz, or where that outgrows what one returned file may hold (16 MiB) as evo.db.gz.00, .01, ... (join them
# with `cat evo.db.gz.* > .evo/evo.db.gz`). The exported table (kernels_out, what the searches published) comes
# back as kernels_out.tar.gz too, so a row is not lost with an archive that could not come back.
set -u
export PYTHONUNBUFFERED=1
SET=$1
FAMS=${2:+--families $2}
CFG=${CONFIG:+--config $CONFIG}
OUT=${OUT:-/tmp}
[ -f .evo/evo.db.gz ] && gunzip -c .evo/evo.db.gz > .evo/evo.db
SHAPES=${ONLY:-$(python3 -c 'import sys; from evo.shapes import load_shapes; print(" ".join(p.key for p in load_shapes(sys.argv[1])))' "$SET")}
for s in $SHAPES; do
  timeout "${SEARCH_TIMEOUT:-150}" python3 -m evo.search --shape "$s" $FAMS $CFG --budget-minutes "${BUDGET:-1}" > "$OUT/search_$s.log" 2>&1
  echo "== $s (rc $?)"; grep -v "^  [0-9a-f]\{10\} \|^\[gen" "$OUT/search_$s.log" | tail -6
  gzip -c .evo/evo.db > "$OUT/evo.db.gz.tmp"
  rm -f "$OUT"/evo.db.gz "$OUT"/evo.db.gz.[0-9][0-9]
  if [ "$(stat -c %s "$OUT/evo.db.gz.tmp")" -gt $((15 * 1024 * 1024)) ]; then
    split -b 15M -d "$OUT/evo.db.gz.tmp" "$OUT/evo.db.gz." && rm -f "$OUT/evo.db.gz.tmp"
  else
    mv "$OUT/evo.db.gz.tmp" "$OUT/evo.db.gz"
  fi
  tar -czf "$OUT/kernels_out.tar.gz" kernels_out
done
[ "${COMPARE:-1}" = 0 ] || timeout "${COMPARE_TIMEOUT:-200}" python3 -m bench.compare --shapes "$SET" $CFG --out-dir "$OUT" 2>&1 | tail -40
