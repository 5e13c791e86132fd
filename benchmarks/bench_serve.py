"""Load test of `t2t-serve` on the loopback: throughput, latency, batching, correctness, overload.

    python benchmarks/bench_serve.py --workdir=runs/demo [--lines=1000] [--clients=1,8,64]
        [--input=FILE] [--engines=jax,ctranslate2] [--group=8] [--overload_clients=128]

The reference is each line's single-line translation, `t2t-translate
--batch_size 1` over the work directory's demo test set; the batch command
itself (`t2t-translate --input test.en`, the config's batch size) is timed
(its wall time with a warm compilation cache, start-up included) and compared
with it. Then, for each engine, a server is started on 127.0.0.1
(`--max_batch` from the config, a warm-up of the test set's batch shapes), and
for each count of `--clients`, that many threads send the lines one per
request, then in groups of `--group` lines; each run is checked line by line
against the single-line translations: lost (no answer), duplicated (answered
twice), different (another text). Printed per run: sentences/s, target
pieces/s, request latency p50/p95/p99, the batch-size histogram (from
/metrics), and the ratio of the server's sentences/s to the batch command's and
to CTranslate2's `translate_batch` on the same exported model and lines (in
this process, all cores, batches of --max_batch). The CTranslate2 engine ranks
with its own length penalty (docs/export.md): its "different" is the share of
lines where it and ours disagree, not an error. Last, per engine, an overload
run: `--overload_clients` clients send groups of --group lines back to back,
never retrying, to a server whose queue holds `--overload_queue` lines;
printed: answers by status (the 200s checked as above), the server's peak
resident memory before and after, whether it still answers /health, and its
exit status on SIGTERM. The 1-minute load average is printed at the start and
the end. Every request loop is bounded; nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 600        # seconds: the bound of every wait here
START_TIMEOUT = 3600  # seconds: a cold warm-up compiles dozens of programs


def _post(connection: http.client.HTTPConnection, lines: list[str]) -> tuple[int, dict]:
  connection.request("POST", "/v1/translate", json.dumps({"text": lines}),
                     {"Content-Type": "application/json"})
  response = connection.getresponse()
  return response.status, json.loads(response.read() or b"{}")


class Server:
  """`t2t-serve` in a process of its own, on a free port of 127.0.0.1."""

  def __init__(self, workdir: str, *flags: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    self.proc = subprocess.Popen(
        [sys.executable, "-m", "t2t_jax.cli.serve", "--workdir", workdir, "--port", "0",
         *flags], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    self.address, self.log = None, []
    threading.Thread(target=self._read, daemon=True).start()
    start = time.monotonic()
    while not self._healthy():
      if self.proc.poll() is not None or time.monotonic() - start > START_TIMEOUT:
        self.proc.kill()
        raise RuntimeError("the server did not start:\n" + "".join(self.log[-10:]))
      time.sleep(0.5)
    self.start_seconds = time.monotonic() - start

  def _read(self):
    for line in self.proc.stderr:
      self.log.append(line)
      found = re.search(r"on http://(127\.0\.0\.1):(\d+)/", line)
      if found:
        self.address = (found.group(1), int(found.group(2)))

  def get(self, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection(*self.address, timeout=TIMEOUT)
    connection.request("GET", path)
    response = connection.getresponse()
    return response.status, response.read().decode()

  def _healthy(self) -> bool:
    try:
      return self.address is not None and self.get("/health")[0] == 200
    except OSError:
      return False

  def peak_rss_mib(self) -> float:
    status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

  def batch_sizes(self) -> dict[str, int]:
    """{bucket upper bound: batches}, non-cumulative, from /metrics."""
    text = self.get("/metrics")[1]
    cumulative = [(le, float(n)) for le, n in
                  re.findall(r't2t_batch_size_bucket\{le="([^"]+)"\} (\S+)', text)]
    counts, before = {}, 0.0
    for le, n in cumulative:
      counts[le.replace(".0", "")] = int(n - before)
      before = n
    return counts

  def stop(self) -> int:
    self.proc.send_signal(signal.SIGTERM)
    return self.proc.wait(TIMEOUT)


def _percentile(values: list[float], q: float) -> float:
  values = sorted(values)
  return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


def load_run(server: Server, lines: list[str], reference: list[str], clients: int, group: int,
             count_pieces) -> dict:
  """`clients` threads send the lines `group` at a time; each answer is checked."""
  work = [list(range(k, min(k + group, len(lines)))) for k in range(0, len(lines), group)]
  answers: dict[int, list[str]] = {i: [] for i in range(len(lines))}
  latencies, statuses, lock = [], {}, threading.Lock()
  cursor = iter(work)

  def client():
    connection = http.client.HTTPConnection(*server.address, timeout=TIMEOUT)
    while True:
      with lock:
        indices = next(cursor, None)
      if indices is None:
        return
      start = time.monotonic()
      status, body = _post(connection, [lines[i] for i in indices])
      with lock:
        latencies.append(time.monotonic() - start)
        statuses[status] = statuses.get(status, 0) + 1
        for i, t in zip(indices, body.get("translations", [])):
          answers[i].append(t["text"])

  before = server.batch_sizes()
  start = time.monotonic()
  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    for future in [pool.submit(client) for _ in range(clients)]:
      future.result(TIMEOUT)
  seconds = time.monotonic() - start
  after = server.batch_sizes()
  texts = [a[0] for a in answers.values() if a]
  return {
      "clients": clients, "group": group, "seconds": round(seconds, 2),
      "sentences_per_s": round(len(lines) / seconds, 1),
      "pieces_per_s": round(sum(map(count_pieces, texts)) / seconds, 1),
      "p50_ms": round(1000 * _percentile(latencies, 50), 1),
      "p95_ms": round(1000 * _percentile(latencies, 95), 1),
      "p99_ms": round(1000 * _percentile(latencies, 99), 1),
      "statuses": statuses,
      "lost": sum(1 for a in answers.values() if not a),
      "duplicated": sum(1 for a in answers.values() if len(a) > 1),
      "different": sum(1 for i, a in answers.items() if a and a[0] != reference[i]),
      "batch_sizes": {le: after[le] - before.get(le, 0) for le in after
                      if after[le] - before.get(le, 0)},
  }


def overload_run(server: Server, lines: list[str], reference: list[str], clients: int,
                 group: int, requests_per_client: int) -> dict:
  """Every client sends its requests back to back, never retrying: the queue overflows.
  The lines answered (200) are checked against `reference`."""
  statuses, different, answered, lock = {}, [0], [0], threading.Lock()
  rss_before = server.peak_rss_mib()

  def client(c):
    connection = http.client.HTTPConnection(*server.address, timeout=TIMEOUT)
    for r in range(requests_per_client):
      start = (c * requests_per_client + r) * group % len(lines)
      indices = [(start + k) % len(lines) for k in range(group)]
      status, body = _post(connection, [lines[i] for i in indices])
      with lock:
        statuses[status] = statuses.get(status, 0) + 1
        if status == 200:
          texts = [t["text"] for t in body["translations"]]
          answered[0] += len(texts)
          different[0] += sum(t != reference[i] for i, t in zip(indices, texts))
          different[0] += len(indices) - len(texts)

  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    for future in [pool.submit(client, c) for c in range(clients)]:
      future.result(TIMEOUT)
  return {"clients": clients, "group": group, "statuses": statuses,
          "lines_answered": answered[0], "different": different[0],
          "peak_rss_mib_before": round(rss_before, 1),
          "peak_rss_mib_after": round(server.peak_rss_mib(), 1),
          "health_after": server.get("/health")[0]}


def batch_command(workdir: str, input_path: str, *flags: str) -> tuple[list[str], float]:
  """t2t-translate's output for the file, and its wall time (start-up included)."""
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  start = time.monotonic()
  out = subprocess.run([sys.executable, "-m", "t2t_jax.cli.translate", "--workdir", workdir,
                        "--input", input_path, *flags], cwd=ROOT, env=env, capture_output=True,
                       text=True, check=True, timeout=TIMEOUT)
  return out.stdout.splitlines(), time.monotonic() - start


def ctranslate2_batch(workdir: str, lines: list[str], batch_size: int) -> float:
  """Seconds of CTranslate2's translate_batch over the lines (the export the server wrote)."""
  import ctranslate2  # pylint: disable=import-outside-toplevel
  from t2t_jax import inference  # pylint: disable=import-outside-toplevel
  from t2t_jax.serve import engines  # pylint: disable=import-outside-toplevel
  model_dir = pathlib.Path(workdir) / engines.CTRANSLATE2_DIR
  translator = inference.Translator(workdir)
  cfg, sp = translator.cfg, translator.tokenizer.sp
  add_eos = not json.loads((model_dir / "config.json").read_text()).get("add_source_eos")
  pieces = [sp.encode(line, out_type=str) + (["</s>"] if add_eos else []) for line in lines]
  model = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32")
  model.translate_batch(pieces[:batch_size], beam_size=cfg.beam_size)      # load, warm
  start = time.monotonic()
  model.translate_batch(pieces, beam_size=cfg.beam_size, length_penalty=cfg.alpha,
                        max_batch_size=batch_size,
                        max_decoding_length=cfg.max_len)
  return time.monotonic() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", default="runs/demo", help="a trained work directory")
  parser.add_argument("--input", help="source lines (default: the work directory's test set)")
  parser.add_argument("--lines", type=int, default=1000, help="the first N lines of it")
  parser.add_argument("--clients", default="1,8,64", help="concurrent clients of each run")
  parser.add_argument("--group", type=int, default=8, help="lines per request of the grouped runs")
  parser.add_argument("--engines", default="jax,ctranslate2", help="t2t-serve --engine values")
  parser.add_argument("--overload_clients", type=int, default=128,
                      help="clients of the overload run")
  parser.add_argument("--overload_queue", type=int, default=64,
                      help="t2t-serve --max_queue of the overload run")
  parser.add_argument("--overload_requests", type=int, default=4, help="per client")
  args = parser.parse_args()
  sys.path.insert(0, str(ROOT))
  from t2t_jax import inference  # pylint: disable=import-outside-toplevel

  workdir = args.workdir
  cfg_data = json.loads((pathlib.Path(workdir) / "config.json").read_text())
  source = pathlib.Path(args.input or pathlib.Path(workdir) / "data" / cfg_data["dataset"] /
                        f"test.{cfg_data.get('source_lang', 'en')}")
  lines = source.read_text(encoding="utf-8").splitlines()[:args.lines]
  tokenizer = inference.load_tokenizer(workdir)
  count_pieces = lambda text: len(tokenizer.encode(text)) - 1 if text.strip() else 0
  longest = max(count_pieces(line) for line in lines)
  results = {"lines": len(lines), "load_average_start": os.getloadavg()[0], "runs": []}
  with tempfile.NamedTemporaryFile("w", suffix=".en") as f:
    f.write("".join(line + "\n" for line in lines))
    f.flush()
    reference, _ = batch_command(workdir, f.name, "--batch_size", "1")
    batch_command(workdir, f.name)                       # fills the compilation cache
    batched, command_seconds = batch_command(workdir, f.name)
  results.update(batch_command_s=round(command_seconds, 2),
                 batch_command_sentences_per_s=round(len(lines) / command_seconds, 1),
                 batch_command_different=sum(a != b for a, b in zip(batched, reference)))
  print(json.dumps({k: v for k, v in results.items() if k != "runs"}), flush=True)
  engine_names = args.engines.split(",")
  for engine in engine_names:
    results["runs"] += engine_runs(workdir, engine, lines, reference, args, longest,
                                   results["batch_command_sentences_per_s"], count_pieces)
  if "ctranslate2" in engine_names:
    seconds = ctranslate2_batch(workdir, lines, cfg_data["decode_batch_size"])
    results["ctranslate2_translate_batch_sentences_per_s"] = round(len(lines) / seconds, 1)
    for run in results["runs"]:
      run["ratio_to_ctranslate2"] = round(
          run["sentences_per_s"] / results["ctranslate2_translate_batch_sentences_per_s"], 2)
    print(json.dumps({"ctranslate2_translate_batch_sentences_per_s":
                      results["ctranslate2_translate_batch_sentences_per_s"]}), flush=True)
  for engine in engine_names:
    server = Server(workdir, "--engine", engine, "--warmup_pieces", str(longest), "--max_queue",
                    str(args.overload_queue))
    overload = {"engine": engine, **overload_run(server, lines, reference,
                                                 args.overload_clients, args.group,
                                                 args.overload_requests)}
    overload["exit_status"] = server.stop()
    results.setdefault("overload", []).append(overload)
    print(json.dumps({"overload": overload}), flush=True)
  results["load_average_end"] = os.getloadavg()[0]
  print(json.dumps(results))


def engine_runs(workdir: str, engine: str, lines: list[str], reference: list[str],
                args: argparse.Namespace, longest: int, command_rate: float,
                count_pieces) -> list[dict]:
  """One server of `engine`: every count of clients, one line per request then in groups."""
  server = Server(workdir, "--engine", engine, "--warmup_pieces", str(longest))
  print(json.dumps({"engine": engine, "start_s": round(server.start_seconds, 1)}), flush=True)
  runs = []
  for group in (1, args.group):
    for clients in map(int, args.clients.split(",")):
      run = {"engine": engine, **load_run(server, lines, reference, clients, group, count_pieces)}
      run["ratio_to_batch_command"] = round(run["sentences_per_s"] / command_rate, 2)
      runs.append(run)
      print(json.dumps(run), flush=True)
  exit_status = server.stop()
  for run in runs:
    run["exit_status"] = exit_status
  return runs

if __name__ == "__main__":
  main()
