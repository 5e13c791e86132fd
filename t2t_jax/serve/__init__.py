"""t2t-serve: the HTTP front (app), dynamic batching (batcher), engines, metrics, the page."""
