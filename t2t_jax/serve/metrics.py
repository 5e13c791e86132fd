"""The server's Prometheus metrics (prometheus_client), in a registry of its own per server.

    metrics = Metrics(queued=lambda: batcher.queued)
    metrics.batch(lines, seconds)                       # after each decoded batch
    metrics.request(status=200, seconds=0.1, sentences=3, tokens=42)
    body, content_type = metrics.render()               # GET /metrics
"""

from __future__ import annotations

from typing import Callable

import prometheus_client as prom

# Lines per batch: powers of two, as decoding batches are shaped
# (decoding/sentence_batches.py: source_rows).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
  """Requests, sentences, tokens, batch sizes, queue length and latency of one server."""

  def __init__(self, queued: Callable[[], int]):
    # A registry per server, so that several servers (tests) in one process keep apart.
    self.registry = prom.CollectorRegistry()
    r = self.registry
    self.requests = prom.Counter("t2t_requests", "Translation requests answered, by HTTP status",
                                 ["status"], registry=r)
    self.sentences = prom.Counter("t2t_sentences", "Input lines translated", registry=r)
    self.tokens = prom.Counter("t2t_target_tokens",
                               "Pieces of the best translations (without EOS)", registry=r)
    self.batch_size = prom.Histogram("t2t_batch_size", "Lines per decoded batch",
                                     buckets=BATCH_BUCKETS, registry=r)
    self.batch_seconds = prom.Histogram("t2t_batch_seconds", "Time to decode one batch",
                                        buckets=LATENCY_BUCKETS, registry=r)
    self.latency = prom.Histogram("t2t_request_latency_seconds",
                                  "Time from a request's arrival to its answer",
                                  buckets=LATENCY_BUCKETS, registry=r)
    queue = prom.Gauge("t2t_queue_lines", "Lines waiting for a batch", registry=r)
    queue.set_function(queued)

  def batch(self, lines: int, seconds: float) -> None:
    self.batch_size.observe(lines)
    self.batch_seconds.observe(seconds)

  def request(self, status: int, seconds: float, sentences: int = 0, tokens: int = 0) -> None:
    self.requests.labels(status=str(status)).inc()
    self.latency.observe(seconds)
    self.sentences.inc(sentences)
    self.tokens.inc(tokens)

  def render(self) -> tuple[bytes, str]:
    return prom.generate_latest(self.registry), prom.CONTENT_TYPE_LATEST
