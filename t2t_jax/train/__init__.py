"""Training: the loop (`trainer`), the per-device steps, loss, optimiser, device mapping, memory fitting, FLOPs, metrics."""
