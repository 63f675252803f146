#!/usr/bin/env bash
# One device call for the text-task figures on a GPU machine (bench/results/*gpu*): install jaxrl
# without touching the image's packages, then the model parity and the GSM8K recipe's cost.
set -x
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
python3 -c "import jax, flax, optax, orbax.checkpoint; print(jax.__version__, flax.__version__, jax.devices())"
timeout 120 python3 bench/text_model_parity.py; cp bench/results/text_model_parity.json "$OUT/" 2>/dev/null
timeout ${RECIPE_TIMEOUT:-360} python3 bench/lm_gsm8k_recipe.py --updates ${RECIPE_UPDATES:-6} 2>&1 | tail -60
cp bench/results/lm_gsm8k_recipe.json "$OUT/" 2>/dev/null
timeout ${SCORING_TIMEOUT:-150} python3 bench/text_scoring.py --repeats 3 2>&1 | tail -12
cp bench/results/text_scoring.json "$OUT/text_scoring_gpu.json" 2>/dev/null; cp bench/results/text_scoring.md "$OUT/text_scoring_gpu.md" 2>/dev/null
true
