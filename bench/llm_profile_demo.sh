#!/usr/bin/env bash
# GPU demo of the LLM path with profiler evidence (< 5 min on an H100/H200):
#   bash bench/gpu_smoke.sh bash bench/llm_profile_demo.sh [SHAPE] [MINUTES]
# Starts the scripted OpenAI-compatible server (evo.testing.fake_llm --demo), runs one mutate+llm search with
# Nsight Compute profiling on, then prints from the archive: the conversations (prompt sizes) and one stored
# prompt that carries the parent's ptxas report and its Nsight Compute metrics.
set -u
SHAPE=${1:-4096x4096x1024}
MINUTES=${2:-2.5}
OUT=${OUT:-/tmp/llm-demo}
mkdir -p "$OUT"
DB="$OUT/llm-demo.db"
PORT=8011
rm -f "$DB" "$DB-wal" "$DB-shm"
NCU=$(python3 -c "from evo.profile import find_ncu; print(find_ncu())")
echo "ncu: ${NCU:-not found}"; [ -n "$NCU" ] && "$NCU" --version | tail -1

python3 -m evo.testing.fake_llm --demo --port $PORT > "$OUT/fake_llm.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 50); do grep -q "serving" "$OUT/fake_llm.log" 2>/dev/null && break; sleep 0.1; done

cat > "$OUT/llm-demo.yaml" <<YAML
search: {proposer_weights: {mutate: 1, llm: 1}, children: 6}
check: {sanitize: false}        # the champion's compute-sanitizer pass is not what this demo is about
llm: {backoff_s: 0.1, profile: true, profile_max: 4, concurrency: 2}
YAML
export EVO_LLM_API_KEY=EMPTY
python3 -m evo.search --shape "$SHAPE" --proposer mutate,llm --budget-minutes "$MINUTES" --db "$DB" --out "$OUT/kernels" \
  --config "$OUT/llm-demo.yaml" --llm-url "http://127.0.0.1:$PORT/v1" --llm-model fake 2>&1 | tee "$OUT/search.log" | tail -40

echo; echo "== preflight and profiler notes"
grep -E "preflight|note:|llm:|stopping" "$OUT/search.log"
echo; echo "== conversations (python -m evo.conversations --db $DB list)"
python3 -m evo.conversations --db "$DB" list | tee "$OUT/conversations.txt" | tail -25
echo; echo "== Nsight Compute profiles stored"
python3 - "$DB" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for h, ok, kernel, metrics, detail, secs in db.execute("SELECT hash, ok, kernel, metrics, detail, seconds FROM profiles"):
    m = json.loads(metrics or "{}")
    print(f"{h[:16]:<16} ok={ok} {secs:5.1f}s {kernel[:70]:<70} {len(m)} metrics {detail[:80]}")
PY
ID=$(python3 - "$DB" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
r = db.execute("SELECT id FROM conversations WHERE messages LIKE '%Nsight Compute, one launch of the parent%' "
               "AND messages LIKE '%ptxas report of the parent%' ORDER BY id DESC LIMIT 1").fetchone()
print(r[0] if r else "")
PY
)
if [ -z "$ID" ]; then
  echo "no stored prompt carries both ptxas and Nsight Compute sections"; exit 1
fi
echo; echo "== python -m evo.conversations --db $DB show $ID --sections"
python3 -m evo.conversations --db "$DB" show "$ID" --sections | tee "$OUT/prompt-$ID.txt" | head -c 60000
echo; echo "== prompt sizes (estimated tokens) of every stored improve prompt"
python3 - "$DB" <<'PY'
import json, sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
t = [json.loads(s)["tokens_est"] for (s,) in db.execute("SELECT sections FROM conversations WHERE kind='improve'") if s]
if t:
    print(f"{len(t)} improve prompts: min {min(t)}, median {statistics.median(t):.0f}, max {max(t)} tokens (budget llm.prompt_tokens)")
PY
