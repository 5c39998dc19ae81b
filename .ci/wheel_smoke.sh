#!/usr/bin/env bash
# CI: build the wheel, install it into a fresh virtual environment, and run a --compile-only search from another
# directory: the installed package alone (kernel families, prompts, defaults, shape sets) must be enough.
# Needs nvcc (skipped with a note without it). The project's dependencies come from the environment .ci/run set up
# (the venv sees them through --system-site-packages); the wheel is installed into the venv and must be what runs.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/dist" "$work/elsewhere"

# build from a copy of the files git knows (tracked + new, not ignored): no build/ or egg-info in the checkout
(cd "$repo" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src" 2>/dev/null \
  || cp -r "$repo/." "$work/src")
"$py" -m pip wheel -q --no-deps --disable-pip-version-check -w "$work/dist" "$work/src" \
  || "$py" -m pip wheel -q --no-deps --no-build-isolation --disable-pip-version-check -w "$work/dist" "$work/src"
whl="$(ls "$work"/dist/evo-*.whl)"
echo "wheel: $(basename "$whl")"
for need in evo/defaults.yaml evo/prompts/system.md evo/templates/mma_sm80/kernel.cu evo/templates/simt/family.yaml \
            evo/shape_sets/llm.yaml; do
  "$py" -c "import sys, zipfile; sys.exit(0 if '$need' in zipfile.ZipFile('$whl').namelist() else 1)" \
    || { echo "wheel lacks $need"; exit 1; }
done

"$py" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install -q --no-deps --disable-pip-version-check "$whl"
cd "$work/elsewhere"   # no templates/, shapes/ or evo/ here
"$work/venv/bin/python" - "$work/venv" <<'PY'
import sys
from pathlib import Path
import evo, evo.families, evo.shapes
venv = Path(sys.argv[1]).resolve()
assert venv in Path(evo.__file__).resolve().parents, f"evo imported from {evo.__file__}, not from the wheel"
fams = evo.families.load_families()
assert {"simt", "mma_sm80"} <= {f.name for f in fams}, fams
assert evo.shapes.load_shapes("shapes/llm.yaml")
print(f"installed evo at {Path(evo.__file__).parent}: {len(fams)} families, shipped shape sets found")
PY
if ! command -v nvcc >/dev/null 2>&1; then
  echo "nvcc not found: the --compile-only search is skipped"
  exit 0
fi
printf 'search: {initial_random: 1}\ncompile: {jobs: 1}\n' > small.yaml
"$work/venv/bin/python" -m evo.search --shape 128x128x128 --compile-only --arch sm_80 --families simt \
  --config small.yaml --db "$work/evo.db" --out "$work/out"
echo "wheel smoke: ok"
