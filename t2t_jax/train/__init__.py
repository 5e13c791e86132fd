"""Training: the loop (`trainer`), the update built from a config, the per-device steps, loss,
optimiser, device mapping, memory fitting, FLOPs, metrics."""

# Its public modules (any other module is a part of these).
__all__ = ["builder", "flops", "memory", "optim", "parallel", "steps", "trainer"]
