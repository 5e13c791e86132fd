"""Load test of `t2t-serve` on the loopback: throughput, latency, batching, correctness, overload.

    python benchmarks/bench_serve.py --workdir=runs/demo [--lines=1000] [--clients=1,8,64]
        [--input=FILE] [--engines=jax,ctranslate2] [--group=8] [--overload_clients=128]

The reference is each line's single-line translation, `t2t-translate --batch_size 1`
over the work directory's demo test set; the batch command itself (`t2t-translate
--input test.en`, the config's batch size) is timed (its wall time with a warm
compilation cache, start-up included) and compared with it. Then, for each engine, a
server is started on 127.0.0.1 (its default batch size, a warm-up of the test set's
batch shapes, `--server_flags`), and for each count of `--clients`, that many clients
(keep-alive connections, all on one asyncio thread) send the lines one per request, then
in groups of `--group` lines; each run is checked line by line against the single-line
translations: lost (no answer), duplicated (answered twice), different (another text).
Printed per run: sentences/s, target pieces/s, request latency p50/p95/p99, the
batch-size histogram (from /metrics), and the ratio of the server's sentences/s to the
batch command's and to CTranslate2's `translate_batch` on the same exported model and
lines (in a process of its own, batches of --reference_batch, best of 3, the faster of
its default threads and a replica of one thread per core: `ctranslate2_batch`). The
CTranslate2 engine ranks with its own length penalty (docs/export.md): its "different"
is the share of lines where it and ours disagree, not an error. Last, per engine, an
overload run: `--overload_clients` clients send groups of --group lines back to back,
never retrying, to a server whose queue holds `--overload_queue` lines; printed: answers
by status (the 200s checked as above), the server's peak resident memory before and
after, whether it still answers /health, and its exit status on SIGTERM. The 1-minute
load average is printed at the start and the end. Every request loop is bounded; nothing
leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
TIMEOUT = 600        # seconds: the bound of every wait here
START_TIMEOUT = 3600  # seconds: a cold warm-up compiles dozens of programs


class _Client:
  """One keep-alive connection of the load runs' clients, which all run on one asyncio
  thread: threads of http.client took more CPU, which the server then lacks on a machine
  of few cores (docs/benchmarks.md, "Serving", the front)."""

  LENGTH = re.compile(rb"\r\ncontent-length: *(\d+)", re.IGNORECASE)

  def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    self.reader, self.writer = reader, writer

  @classmethod
  async def open(cls, address: tuple[str, int]) -> "_Client":
    return cls(*await asyncio.open_connection(*address))

  async def post(self, lines: list[str]) -> tuple[int, dict]:
    body = json.dumps({"text": lines}).encode()
    self.writer.write(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                      % (len(body), body))
    head = await self.reader.readuntil(b"\r\n\r\n")
    payload = await self.reader.readexactly(int(self.LENGTH.search(head).group(1)))
    return int(head.split(b" ", 2)[1]), json.loads(payload or b"{}")

  def close(self) -> None:
    self.writer.close()


def _run_clients(address: tuple[str, int], clients: int, client) -> None:
  """`client(connection, c)` for c in range(clients), all at once, each on a connection of
  its own; bounded by TIMEOUT."""
  async def one(c):
    connection = await _Client.open(address)
    try:
      await client(connection, c)
    finally:
      connection.close()

  async def run():
    await asyncio.wait_for(asyncio.gather(*[one(c) for c in range(clients)]), TIMEOUT)

  asyncio.run(run())


class Server:
  """`t2t-serve` in a process of its own, on a free port of 127.0.0.1."""

  def __init__(self, workdir: str, *flags: str, env: Optional[dict] = None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
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

  def peak_rss_mib(self, field: str = "VmHWM") -> float:
    """Peak resident memory (VmHWM), or now (VmRSS)."""
    status = pathlib.Path(f"/proc/{self.proc.pid}/status").read_text()
    return int(re.search(field + r":\s+(\d+) kB", status).group(1)) / 1024

  def wait_warm(self) -> float:
    """Seconds from now until /health says the background warm-up is done."""
    start = time.monotonic()
    while not json.loads(self.get("/health")[1]).get("warm", True):
      if time.monotonic() - start > START_TIMEOUT:
        raise RuntimeError("the background warm-up did not end")
      time.sleep(0.5)
    return time.monotonic() - start

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
  """`clients` clients send the lines `group` at a time; each answer is checked."""
  work = iter([list(range(k, min(k + group, len(lines)))) for k in range(0, len(lines), group)])
  answers: dict[int, list[str]] = {i: [] for i in range(len(lines))}
  latencies, statuses = [], {}

  async def client(connection, _):
    for indices in work:
      start = time.monotonic()
      status, body = await connection.post([lines[i] for i in indices])
      latencies.append(time.monotonic() - start)
      statuses[status] = statuses.get(status, 0) + 1
      for i, t in zip(indices, body.get("translations", [])):
        answers[i].append(t["text"])

  before = server.batch_sizes()
  start = time.monotonic()
  _run_clients(server.address, clients, client)
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
  statuses, different, answered = {}, [0], [0]
  rss_before = server.peak_rss_mib()

  async def client(connection, c):
    for r in range(requests_per_client):
      start = (c * requests_per_client + r) * group % len(lines)
      indices = [(start + k) % len(lines) for k in range(group)]
      status, body = await connection.post([lines[i] for i in indices])
      statuses[status] = statuses.get(status, 0) + 1
      if status == 200:
        texts = [t["text"] for t in body["translations"]]
        answered[0] += len(texts)
        different[0] += sum(t != reference[i] for i, t in zip(indices, texts))
        different[0] += len(indices) - len(texts)

  _run_clients(server.address, clients, client)
  return {"clients": clients, "group": group, "statuses": statuses,
          "lines_answered": answered[0], "different": different[0],
          "peak_rss_mib_before": round(rss_before, 1),
          "peak_rss_mib_after": round(server.peak_rss_mib(), 1),
          "health_after": server.get("/health")[0]}


def startup_runs(workdir: str, lines: list[str], count_pieces, engine: str = "jax") -> list[dict]:
  """`t2t-serve --workdir COPY` (defaults) on a copy of the work directory with empty
  compilation caches, started twice: seconds to /health 200; then one single-line request
  per piece count of `lines`, one after the other (latency p50/p99); the seconds until the
  background warm-up is done; resident memory then."""
  by_length = {}
  for line in lines:
    by_length.setdefault(count_pieces(line), line)
  runs = []
  with tempfile.TemporaryDirectory() as tmp:
    copy = pathlib.Path(tmp) / "workdir"
    shutil.copytree(workdir, copy, ignore=shutil.ignore_patterns("run.lock"))
    env = {"XDG_CACHE_HOME": f"{tmp}/xdg", "T2T_JAX_COMPILATION_CACHE": f"{tmp}/jax"}
    for start in ("empty caches", "again"):
      server = Server(str(copy), "--engine", engine, env=env)
      latencies = []

      async def one_by_one(connection, _):
        for line in by_length.values():
          begin = time.monotonic()
          status, _ = await connection.post([line])
          latencies.append(time.monotonic() - begin)
          if status != 200:
            raise RuntimeError(f"a request answered {status}")

      _run_clients(server.address, 1, one_by_one)
      run = {"engine": engine, "start": start, "health_s": round(server.start_seconds, 1),
             "lengths": len(latencies), "p50_ms": round(1000 * _percentile(latencies, 50), 1),
             "p99_ms": round(1000 * _percentile(latencies, 99), 1),
             "max_ms": round(1000 * max(latencies), 1),
             "warm_after_health_s": round(server.wait_warm() + sum(latencies), 1),
             "rss_mib": round(server.peak_rss_mib("VmRSS"), 1),
             "peak_rss_mib": round(server.peak_rss_mib(), 1),
             "load_average": os.getloadavg()[0]}
      run["exit_status"] = server.stop()
      print(json.dumps(run), flush=True)
      runs.append(run)
  return runs


def batch_command(workdir: str, input_path: str, *flags: str) -> tuple[list[str], float]:
  """t2t-translate's output for the file, and its wall time (start-up included)."""
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  start = time.monotonic()
  out = subprocess.run([sys.executable, "-m", "t2t_jax.cli.translate", "--workdir", workdir,
                        "--input", input_path, *flags], cwd=ROOT, env=env, capture_output=True,
                       text=True, check=True, timeout=TIMEOUT)
  return out.stdout.splitlines(), time.monotonic() - start


def ctranslate2_batch(workdir: str, input_path: str, lines: int, batch_size: int,
                      repeats: int = 3) -> dict[str, float]:
  """CTranslate2's translate_batch over the first `lines` lines of `input_path` (the export
  the server wrote), in a process of its own that imports nothing of ours nor JAX
  (`--translate_batch`): the best sentences/s of `repeats` runs with CTranslate2's default
  threads, and with a replica of one thread per core (`inter_threads`), which is faster
  and steadier on a 2-core VM; the reference is the faster of the two."""
  from t2t_jax.serve import engines  # pylint: disable=import-outside-toplevel
  out = subprocess.run([sys.executable, __file__, "--translate_batch", "--workdir", workdir,
                        "--model_dir", str(pathlib.Path(workdir) / engines.CTRANSLATE2_DIR),
                        "--input", input_path, "--lines", str(lines), "--batch", str(batch_size),
                        "--repeats", str(repeats)], capture_output=True, text=True, check=True,
                       timeout=TIMEOUT)
  return json.loads(out.stdout.splitlines()[-1])


def _translate_batch(workdir: str, model_dir: str, input_path: str, lines: int,
                     batch_size: int, repeats: int) -> None:
  """`ctranslate2_batch`'s process: beam and length penalty from the run's config, float32."""
  import ctranslate2  # pylint: disable=import-outside-toplevel
  import sentencepiece  # pylint: disable=import-outside-toplevel
  model_dir = pathlib.Path(model_dir)
  cfg = json.loads((pathlib.Path(workdir) / "config.json").read_text())
  sp = sentencepiece.SentencePieceProcessor(model_file=str(pathlib.Path(workdir) / "vocab" /
                                                           "spm.model"))
  add_eos = not json.loads((model_dir / "config.json").read_text()).get("add_source_eos")
  text = pathlib.Path(input_path).read_text(encoding="utf-8").splitlines()[:lines]
  pieces = [sp.encode(line, out_type=str) + (["</s>"] if add_eos else []) for line in text]
  cores = os.cpu_count() or 1
  rates = {}
  for name, threads in (("default_threads", {}),
                        ("replica_per_core", {"inter_threads": cores, "intra_threads": 1})):
    model = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32",
                                   **threads)
    model.translate_batch(pieces[:batch_size], beam_size=cfg["beam_size"])      # load, warm
    best = 0.0
    for _ in range(repeats):
      start = time.monotonic()
      model.translate_batch(pieces, beam_size=cfg["beam_size"], length_penalty=cfg["alpha"],
                            max_batch_size=batch_size, max_decoding_length=cfg["max_len"])
      best = max(best, len(pieces) / (time.monotonic() - start))
    rates[name] = round(best, 1)
    del model
  print(json.dumps(rates))


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
  parser.add_argument("--groups", default=None,
                      help="lines per request of the load runs (default: 1 and --group)")
  parser.add_argument("--startup", action="store_true",
                      help="only the start-up runs (startup_runs) of the JAX engine")
  parser.add_argument("--overload", action=argparse.BooleanOptionalAction, default=True,
                      help="the overload runs")
  parser.add_argument("--batch_command", action=argparse.BooleanOptionalAction, default=True,
                      help="time t2t-translate --input over the lines")
  parser.add_argument("--server_flags", default="",
                      help="more t2t-serve flags for every server, e.g. '--max_batch 8'")
  parser.add_argument("--reference", help="a file of the single-line translations: read "
                                          "if it exists, else written")
  parser.add_argument("--reference_batch", type=int, default=64,
                      help="translate_batch's max_batch_size (the reference)")
  parser.add_argument("--translate_batch", action="store_true",
                      help="only print translate_batch's sentences/s (a process of its own)")
  parser.add_argument("--model_dir", help=argparse.SUPPRESS)
  parser.add_argument("--batch", type=int, default=64, help=argparse.SUPPRESS)
  parser.add_argument("--repeats", type=int, default=3, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.translate_batch:
    _translate_batch(args.workdir, args.model_dir, args.input, args.lines, args.batch,
                     args.repeats)
    return
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
  if args.startup:
    results["startup"] = startup_runs(workdir, lines, count_pieces)
    results["load_average_end"] = os.getloadavg()[0]
    print(json.dumps(results))
    return
  stored = pathlib.Path(args.reference) if args.reference else None
  with tempfile.NamedTemporaryFile("w", suffix=".en") as f:
    f.write("".join(line + "\n" for line in lines))
    f.flush()
    if stored is not None and stored.is_file():
      reference = stored.read_text(encoding="utf-8").splitlines()
    else:
      reference, _ = batch_command(workdir, f.name, "--batch_size", "1")
      if stored is not None:
        stored.write_text("".join(t + "\n" for t in reference), encoding="utf-8")
    if args.batch_command:
      batch_command(workdir, f.name)                       # fills the compilation cache
      batched, command_seconds = batch_command(workdir, f.name)
      results.update(batch_command_s=round(command_seconds, 2),
                     batch_command_sentences_per_s=round(len(lines) / command_seconds, 1),
                     batch_command_different=sum(a != b for a, b in zip(batched, reference)))
  print(json.dumps({k: v for k, v in results.items() if k != "runs"}), flush=True)
  engine_names = args.engines.split(",")
  for engine in engine_names:
    results["runs"] += engine_runs(workdir, engine, lines, reference, args, longest,
                                   results.get("batch_command_sentences_per_s"), count_pieces)
  if "ctranslate2" in engine_names:
    rates = ctranslate2_batch(workdir, str(source), len(lines), args.reference_batch)
    results["ctranslate2_translate_batch"] = rates
    results["ctranslate2_translate_batch_sentences_per_s"] = max(rates.values())
    for run in results["runs"]:
      run["ratio_to_ctranslate2"] = round(
          run["sentences_per_s"] / results["ctranslate2_translate_batch_sentences_per_s"], 2)
    print(json.dumps({"ctranslate2_translate_batch": rates,
                      "ctranslate2_translate_batch_sentences_per_s":
                      results["ctranslate2_translate_batch_sentences_per_s"]}), flush=True)
  for engine in engine_names if args.overload else ():
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
                args: argparse.Namespace, longest: int, command_rate: Optional[float],
                count_pieces) -> list[dict]:
  """One server of `engine`: every count of clients, one line per request then in groups."""
  server = Server(workdir, "--engine", engine, "--warmup_pieces", str(longest),
                  *args.server_flags.split())
  warm = server.wait_warm()
  print(json.dumps({"engine": engine, "start_s": round(server.start_seconds, 1),
                    "warm_after_health_s": round(warm, 1),
                    "rss_mib": round(server.peak_rss_mib("VmRSS"), 1)}), flush=True)
  runs = []
  groups = (1, args.group) if args.groups is None else map(int, args.groups.split(","))
  for group in groups:
    for clients in map(int, args.clients.split(",")):
      run = {"engine": engine, **load_run(server, lines, reference, clients, group, count_pieces)}
      if command_rate:
        run["ratio_to_batch_command"] = round(run["sentences_per_s"] / command_rate, 2)
      runs.append(run)
      print(json.dumps(run), flush=True)
  exit_status = server.stop()
  for run in runs:
    run["exit_status"] = exit_status
  return runs

if __name__ == "__main__":
  main()
