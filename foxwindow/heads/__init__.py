"""Per-head statistics of real models: dependence (V(n), tau(n), the regime), predictions (predict), the verdict and
its calibration (verdict, calibration), the drivers (driver; Hugging Face checkpoints: hf_run), the report (table)
and the `forget` command (command)."""

__all__ = ["api", "calibration", "command", "dependence", "driver", "hf_run", "predict", "result", "table", "verdict"]
