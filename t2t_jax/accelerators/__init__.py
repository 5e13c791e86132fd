"""Programs for accelerators this host may not have: targets, compile, predict (t2t-compile)."""
