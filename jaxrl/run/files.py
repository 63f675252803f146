"""The names of what a run directory holds (one place, so readers and the writer agree)."""

CONFIG_FILE = "config.yaml"  # the resolved config
METRICS_FILE = "metrics.jsonl"  # one record per update
CURVE_FILE = "learning_curve.png"
CHECKPOINT_DIR = "checkpoints"  # checkpoints/<updates done>/
EVAL_FILE = "eval.json"
CHANGES_FILE = "config_changes.jsonl"  # config changes accepted on resume
STOP_FILE = "stopped.json"  # why training ended early (train.stop_at)
INIT_FROM_FILE = "init_from.json"  # the run (and checkpoint) whose parameters this one started from
ALERTS_FILE = "alerts.jsonl"  # signs of a stalled run the trainer reported (jaxrl.run.alerts)
TENSORBOARD_DIR = "tensorboard"  # train.loggers: tensorboard
WANDB_DIR = "wandb"  # train.loggers: wandb
#: Files a run writes; a fresh run refuses a directory that holds any of them.
RUN_FILES = (CONFIG_FILE, METRICS_FILE, CURVE_FILE, CHECKPOINT_DIR, EVAL_FILE, CHANGES_FILE, STOP_FILE, INIT_FROM_FILE, ALERTS_FILE, TENSORBOARD_DIR, WANDB_DIR)
