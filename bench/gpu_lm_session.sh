#!/usr/bin/env bash
# One device call for the GPU recipe (issue: the GSM8K LoRA recipe never compiled on a GPU):
# which LoRA formulation / XLA options compile (bench/gpu_lora_probe.py), then the recipe's cost
# (bench/lm_gsm8k_recipe.py) as shipped, and again under the first XLA flags the probe found
# for the shipped formulation when the shipped run fails. Everything lands in $OUT.
set -x
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
python3 -c "import jax, flax, optax, orbax.checkpoint, chex; print('versions', jax.__version__, flax.__version__, optax.__version__, jax.devices())"
timeout ${PROBE_TIMEOUT:-200} python3 bench/gpu_lora_probe.py --parallel 8 --timeout 150 \
  --forms dot,factored,padded64,merged,reduce --flags default,no_triton_gemm,autotune_0 --out "$OUT"
timeout ${RECIPE_TIMEOUT:-240} python3 bench/lm_gsm8k_recipe.py --updates 6 2>&1 | tail -40
cp bench/results/lm_gsm8k_recipe.json "$OUT/" 2>/dev/null && exit 0
flags=$(python3 - "$OUT/gpu_lora_probe.json" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
ok = [c["xla_flags"] for c in cases if c["form"] == "factored" and c["ok"] and c["xla_flags"]]
print(ok[0] if ok else "")
PY
)
left=$(( 540 - ($(date +%s) - start) ))
if [ -n "$flags" ] && [ $left -gt 150 ]; then
  XLA_FLAGS="$flags" timeout $((left - 20)) python3 bench/lm_gsm8k_recipe.py --updates 6 2>&1 | tail -40
  cp bench/results/lm_gsm8k_recipe.json "$OUT/lm_gsm8k_recipe_flags.json" 2>/dev/null
fi
true
