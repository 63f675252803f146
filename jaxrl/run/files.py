"""The names of what a run directory holds (one place, so readers and the writer agree)."""

CONFIG_FILE = "config.yaml"  # the resolved config
METRICS_FILE = "metrics.jsonl"  # one record per update
CURVE_FILE = "learning_curve.png"
CHECKPOINT_DIR = "checkpoints"  # checkpoints/<updates done>/
EVAL_FILE = "eval.json"
