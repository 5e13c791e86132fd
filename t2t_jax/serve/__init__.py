"""t2t-serve: the HTTP front (app), dynamic batching (batcher), engines, metrics, the page."""

# Its public modules (any other module is a part of these).
__all__ = ["app", "engines", "protocol"]
