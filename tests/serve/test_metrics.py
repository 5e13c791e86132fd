"""serve/metrics.py: what a server's Prometheus page counts, and one registry per server."""

from t2t_jax.serve import metrics as metrics_lib


def _values(metrics) -> dict[str, float]:
  """{sample name with its labels: value} of the rendered page."""
  body, content_type = metrics.render()
  assert content_type.startswith("text/plain")
  values = {}
  for line in body.decode().splitlines():
    if line and not line.startswith("#"):
      name, value = line.rsplit(" ", 1)
      values[name] = float(value)
  return values


def test_requests_batches_and_the_queue_are_counted():
  queued = [3]
  metrics = metrics_lib.Metrics(queued=lambda: queued[0])
  metrics.request(status=200, seconds=0.02, sentences=3, tokens=40)
  metrics.request(status=200, seconds=0.2, sentences=1, tokens=2)
  metrics.request(status=413, seconds=0.001)
  metrics.batch(lines=3, seconds=0.05)
  metrics.batch(lines=1, seconds=0.01)
  queued[0] = 7
  values = _values(metrics)
  assert values['t2t_requests_total{status="200"}'] == 2
  assert values['t2t_requests_total{status="413"}'] == 1
  assert (values["t2t_sentences_total"], values["t2t_target_tokens_total"]) == (4, 42)
  assert values["t2t_batch_size_count"] == 2 and values["t2t_batch_size_sum"] == 4
  assert values['t2t_batch_size_bucket{le="2.0"}'] == 1  # the batch of 1, not that of 3
  assert values["t2t_request_latency_seconds_count"] == 3
  assert values["t2t_queue_lines"] == 7  # read when the page is rendered


def test_two_servers_keep_their_counts_apart():
  one, two = (metrics_lib.Metrics(queued=lambda: 0) for _ in range(2))
  one.request(status=200, seconds=0.1, sentences=5)
  assert _values(one)["t2t_sentences_total"] == 5 and _values(two)["t2t_sentences_total"] == 0
