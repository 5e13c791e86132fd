"""Programs for accelerators this host may not have: targets, compile, predict (t2t-compile)."""

# Its public modules (any other module is a part of these).
__all__ = ["aot", "measure", "plan", "predict", "targets"]
