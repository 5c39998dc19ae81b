#!/usr/bin/env bash
# Sweep throughput on one GPU against several GPUs of the same host: the same shapes, the same per-shape budget,
# a fresh archive and compile cache for each run (nothing measured or compiled by the first helps the second).
#   bash bench/sweep_throughput.sh [SHAPES=shapes/sample24.yaml] [N_SHAPES=8] [MINUTES=0.4] [GPUS=0,1]
# FAMILIES (env) limits the families; the default mma_sm80,wgmma_sm90,wgmma_skinny_sm90 is bench/sweep_kill_resume.sh's list.
# Prints shapes per hour for 1 GPU and for GPUS, and their ratio. Logs and archives go under $OUT when set.
set -u
export PYTHONUNBUFFERED=1
shapes=${1:-shapes/sample24.yaml}; n=${2:-8}; minutes=${3:-0.4}; gpus=${4:-0,1}
out=${OUT:-/tmp/sweep_throughput}; mkdir -p "$out"
ngpus=$(echo "$gpus" | tr ',' '\n' | grep -c .)
run() {  # $1 label, $2 device list
  local dir="$out/$1"; rm -rf "$dir"; mkdir -p "$dir"
  printf 'check: {sanitize: false}\ncompile: {cache_dir: %s/cache}\nsearch: {patience_seconds: 0}\n' "$dir" > "$dir/cfg.yaml"
  local t0=$(date +%s.%N)
  python3 -m evo.sweep --shapes "$shapes" --limit-shapes "$n" --budget-minutes-per-shape "$minutes" \
    --config "$dir/cfg.yaml" --db "$dir/evo.db" --out "$dir/kernels_out" --gpus "$2" \
    --families "${FAMILIES:-mma_sm80,wgmma_sm90,wgmma_skinny_sm90}" > "$dir/sweep.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  local done=$(grep -c '^\[' "$dir/sweep.log")
  python3 - "$1" "$t0" "$t1" "$done" "$rc" <<'PY'
import sys
label, t0, t1, done, rc = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
hours = (t1 - t0) / 3600
print(f"{label}: {done} shapes in {(t1 - t0) / 60:.2f} min wall (exit {rc}): {done / hours:.1f} shapes/hour")
open(f"/tmp/sweep_throughput_{label}.rate", "w").write(f"{done / hours}")
PY
  tail -2 "$dir/sweep.log"
}
nvidia-smi --query-gpu=index,name --format=csv,noheader
run gpu1 0
run "gpu${ngpus}" "$gpus"
python3 - "$ngpus" <<'PY'
import sys
n = sys.argv[1]
one = float(open("/tmp/sweep_throughput_gpu1.rate").read())
many = float(open(f"/tmp/sweep_throughput_gpu{n}.rate").read())
print(f"sweep throughput: {many:.1f} shapes/hour on {n} GPUs vs {one:.1f} on 1 GPU: {many / one:.2f}x")
PY
