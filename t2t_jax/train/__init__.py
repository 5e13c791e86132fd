"""Training: the train step (`step`: loss, optimiser and schedule, the update, its mapping over
devices), the loop (`trainer`), memory fitting, FLOPs and metrics."""

# Its public modules (any other module is a part of these).
__all__ = ["memory", "metrics", "step", "trainer"]
