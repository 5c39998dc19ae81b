#!/usr/bin/env bash
# One device call (through bench/gpu_smoke.sh): a short search of one shape into a fresh archive, then what the
# export writes from it (the launch floor with the ceilings, the cuBLASLt algorithms kept from the baselines,
# spreads, noise band and verdict, kernels_out/README.md), what the dispatcher serves from that table (a cuBLASLt
# row with its stored algorithm), and the report with the archive (lineage, GPU-minutes). Everything under $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp}
printf 'check: {sanitize: false}\n' > /tmp/table_columns.yaml
timeout "${SEARCH_TIMEOUT:-300}" python3 -m evo.search --shape "${SHAPE:-512x2048x4096}" --budget-minutes "${BUDGET:-1}" \
  --config /tmp/table_columns.yaml --db "$OUT/cols.db" --out "$OUT/kernels_out" 2>&1 | tee "$OUT/search.log" | tail -20
EVO_DISPATCH_DECISIONS="$OUT/dispatch.json" python3 - "$OUT/kernels_out" <<'PY'
import json, sys
from pathlib import Path
from evo.dispatch import Dispatcher
root = Path(sys.argv[1])
table = next(root.glob("*/table.json"))
doc = json.loads(table.read_text())
print("ceilings", doc["ceilings"], "| datasheet", doc["datasheet"], "| noise floor", doc["noise_floor"])
for r in doc["rows"]:
    print(r["shape"], r["winner"], r["verdict"], r["speedup_best_library"], "band", r["noise_band"],
          "spreads", r["spread"], r["best_library_spread"], "algorithms", r["library_algorithms"])
print((root / "README.md").read_text())
d = Dispatcher.load(table.parent)
for r in doc["rows"]:
    print("dispatch:", d.explain(r["m"], r["n"], r["k"]))
PY
python3 -m evo.report --db "$OUT/cols.db" --out "$OUT/kernels_out"
