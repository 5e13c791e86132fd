"""The HTTP front (FastAPI): routes, limits, errors and metrics around the batcher and an engine.

    app = create_app(engine, Options(max_batch=16),
                     attention=functools.partial(engines.attention, translator),
                     warm_up=lambda stop: engine.warm_up(30, settings, stop=stop))
    uvicorn.run(app, host="127.0.0.1", port=8000)          # what `t2t-serve` does

Routes: `POST /v1/translate`, `POST /v1/attention` (the page's heatmap),
`GET /v1/model`, `GET /health` (200 once the warm-up has compiled the decoding
programs, 503 before), `GET /metrics` (Prometheus), `GET /` (the page),
`GET /docs` (the OpenAPI page). Every error is {"error": "one line"}, malformed
requests' too, however deep their JSON or long their body; an overloaded or
starting server answers 503 with Retry-After. A request whose client disconnects
leaves the queue at once, and costs one line of log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import pathlib
import signal
import socket
import threading
import time
from typing import Any, Callable, Optional

import fastapi
import httptools  # noqa: F401  pylint: disable=unused-import  (uvicorn's http="httptools")
import uvloop  # noqa: F401  pylint: disable=unused-import  (uvicorn's loop="uvloop")
from fastapi import responses
from fastapi import staticfiles
from starlette import exceptions as starlette_exceptions
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
import uvicorn
from uvicorn.protocols.http import httptools_impl

from t2t_jax import errors
from t2t_jax.inference import streaming
from t2t_jax.serve import batcher as batcher_lib
from t2t_jax.serve import engines
from t2t_jax.serve import metrics as metrics_lib
from t2t_jax.serve import protocol

log = logging.getLogger(__name__)

STATIC = pathlib.Path(__file__).with_name("static")
RETRY_AFTER = "1"     # seconds: a batch of the demo model decodes in well under that
CLIENT_GONE = 499     # nginx's "client closed request"; nobody reads it


@dataclasses.dataclass(frozen=True)
class Options:
  """Batching and limits (`t2t-serve --help` explains each)."""
  max_batch: int = 16
  max_tokens: int = 2048
  max_queue: int = 1024
  max_wait: float = 0.005
  workers: int = 3
  limits: protocol.Limits = protocol.Limits()
  body_timeout: float = 60.0   # seconds without a byte of a request's body: 408 (nginx's default)


class _State:
  """What the routes share: the engine, its batcher, the metrics, readiness."""

  def __init__(self, engine: Any, options: Options):
    self.engine, self.options, self.limits = engine, options, options.limits
    self.ready = threading.Event()
    self.warm = threading.Event()     # the background warm-up is done too
    self.stopping = threading.Event()   # the server stops: the warm-ups should end
    self.failed: Optional[str] = None
    self.metrics = metrics_lib.Metrics(queued=lambda: self.batcher.queued)
    self.batcher = batcher_lib.Batcher(
        engine.translate, tokens=engine.source_tokens, max_tokens=options.max_tokens,
        max_batch=options.max_batch, max_queue=options.max_queue, max_wait=options.max_wait,
        workers=options.workers, on_batch=self.metrics.batch)


def _error(e: protocol.ApiError) -> responses.JSONResponse:
  return responses.JSONResponse({"error": e.message}, e.status, headers=e.headers)


async def _body(request: fastapi.Request, limit: int, timeout: float) -> bytes:
  """The request body, refused with 413 as soon as it passes `limit` bytes, with 408 once no
  byte of it has come for `timeout` seconds (a Content-Length that promises more than comes);
  ApiError CLIENT_GONE if the client leaves first."""
  declared = request.headers.get("content-length", "")
  if declared.isdigit() and int(declared) > limit:
    raise protocol.ApiError(413, f"the request body has {declared} bytes; the limit is {limit}")
  chunks, size = [], 0
  loop = asyncio.get_running_loop()
  try:
    async with asyncio.timeout(timeout) as deadline:
      async for chunk in request.stream():
        deadline.reschedule(loop.time() + timeout)
        size += len(chunk)
        if size > limit:
          raise protocol.ApiError(413, f"the request body passes the limit of {limit} bytes")
        chunks.append(chunk)
  except TimeoutError:
    raise protocol.ApiError(408, f"no byte of the request body came for {timeout:g} s "
                                 f"({size} of {declared or 'its'} bytes came)",
                            {"Connection": "close"}) from None
  except ClientDisconnect:
    log.info("a client left before sending its request: %d of %s bytes of its request body "
             "came", size, declared or "its")
    raise protocol.ApiError(CLIENT_GONE, "the client left") from None
  return b"".join(chunks)


async def _json(request: fastapi.Request, state: _State) -> Any:
  """The request's JSON body; ApiError 415, 413, 408, 400 or CLIENT_GONE."""
  protocol.check_content_type(request.headers.get("content-type"))
  return protocol.parse_json(await _body(request, state.limits.max_body,
                                         state.options.body_timeout))


async def _client_gone(request: fastapi.Request) -> None:
  """Returns when the client disconnects (the body has been read: only that can come)."""
  while (await request.receive())["type"] != "http.disconnect":
    pass


async def _results(request: fastapi.Request, state: _State,
                   future: concurrent.futures.Future) -> Optional[list]:
  """The batcher's results, or None if the client left first (its lines leave the queue)."""
  result = asyncio.wrap_future(future)
  gone = asyncio.ensure_future(_client_gone(request))
  try:
    done, _ = await asyncio.wait({result, gone}, return_when=asyncio.FIRST_COMPLETED)
  finally:
    gone.cancel()
    if not result.done():
      state.batcher.cancel(future)
  return result.result() if result in done else None


def _hypothesis(h: streaming.Hypothesis) -> dict[str, Any]:
  pairs = None if h.alignment is None else [list(p) for p in h.alignment]
  return {"text": h.text, "score": round(h.score, 4), "alignment": pairs}


def _translation(t: streaming.Translation) -> dict[str, Any]:
  best = _hypothesis(t.hypotheses[0])
  return {**best, "nbest": [_hypothesis(h) for h in t.hypotheses]}


def _settings(state: _State, body: protocol.TranslateRequest) -> engines.Settings:
  protocol.check_lines(body.text, state.limits)
  protocol.check_beam(body.beam_size, state.limits)
  settings = engines.Settings(beam_size=body.beam_size or state.engine.cfg.beam_size,
                              n_best=body.n_best, alignments=body.alignments)
  try:
    state.engine.check(settings)
  except ValueError as e:
    raise protocol.ApiError(422, str(e)) from None
  return settings


def _submit(state: _State, lines: list[str], settings: engines.Settings
            ) -> concurrent.futures.Future:
  if state.failed is not None:
    raise protocol.ApiError(500, f"the server failed to start: {state.failed}")
  if not state.ready.is_set():
    raise protocol.ApiError(503, "the server is starting (compiling the decoding programs)",
                            {"Retry-After": RETRY_AFTER})
  try:
    return state.batcher.submit(lines, settings)
  except ValueError as e:   # a line the tokenizer refuses: a multilingual model's without its token
    raise protocol.ApiError(422, str(e)) from None
  except batcher_lib.Overloaded as e:
    raise protocol.ApiError(503, f"overloaded: {e}", {"Retry-After": RETRY_AFTER}) from None
  except batcher_lib.Stopped as e:
    raise protocol.ApiError(503, str(e)) from None


async def _translate(state: _State, request: fastapi.Request) -> responses.Response:
  """POST /v1/translate: one translation per line of `text`, in order."""
  start = time.monotonic()
  try:
    body = protocol.validate(protocol.TranslateRequest, await _json(request, state))
    future = _submit(state, body.text, _settings(state, body))
    results = await _results(request, state, future)
  except protocol.ApiError as e:
    state.metrics.request(e.status, time.monotonic() - start)
    return _error(e)
  if results is None:
    log.info("a client left before its answer (%d lines)", len(body.text))
    state.metrics.request(CLIENT_GONE, time.monotonic() - start)
    return responses.Response(status_code=CLIENT_GONE)
  tokens = sum(state.engine.count_pieces(t.text) for t in results)
  state.metrics.request(200, time.monotonic() - start, len(results), tokens)
  return responses.JSONResponse({"translations": [_translation(t) for t in results]})


class Front:
  """The server's ASGI app: POST /v1/translate goes straight to `_translate`, the rest to
  FastAPI (`api`), which also documents that route (/docs) and answers its other methods.

  FastAPI's handling around a route (its middleware, routing, dependencies)
  took more of the event loop's time than the route itself, and every client
  waits on that one thread, so this route goes around it (docs/benchmarks.md,
  "Serving", the front). `state.server` holds what the routes share.
  """

  def __init__(self, api: fastapi.FastAPI):
    self.api, self.state = api, api.state

  async def __call__(self, scope, receive, send) -> None:
    if (scope["type"] == "http" and scope["path"] == "/v1/translate"
        and scope["method"] == "POST"):
      response = await _translate(self.state.server, fastapi.Request(scope, receive))
      await response(scope, receive, send)
    else:
      await self.api(scope, receive, send)


def _translate_route(app: fastapi.FastAPI) -> None:
  schema = protocol.TranslateRequest.model_json_schema()

  @app.post("/v1/translate", response_model=protocol.TranslateResponse,
            openapi_extra={"requestBody": {"required": True,
                                           "content": {"application/json": {"schema": schema}}}},
            responses={code: {"model": protocol.Error} for code in (400, 413, 422, 503)})
  async def translate():
    """One translation per line of `text`, in order (n-best lists, word alignments)."""
    raise AssertionError("POST /v1/translate is answered by Front, before FastAPI")


def _other_routes(app: fastapi.FastAPI, state: _State,
                  attention: Optional[Callable[..., dict]]) -> None:
  @app.post("/v1/attention", responses={code: {"model": protocol.Error} for code in (400, 422)},
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                "schema": protocol.AttentionRequest.model_json_schema()}}}})
  async def attention_route(request: fastapi.Request):
    """Our model's cross-attention of one decoder layer (and head) for a (source, target)."""
    try:
      body = protocol.validate(protocol.AttentionRequest, await _json(request, state))
      protocol.check_lines([body.source, body.target], state.limits)
      if attention is None:
        raise protocol.ApiError(404, "this server has no attention maps")
      try:
        return await run_in_threadpool(attention, body.source, body.target, layer=body.layer,
                                       head=body.head)
      except ValueError as e:
        raise protocol.ApiError(422, str(e)) from None
    except protocol.ApiError as e:
      return _error(e)

  @app.get("/v1/model")
  async def model_info():
    """The engine, the decoder's layers and heads, the default beam, the server's limits."""
    cfg = state.engine.cfg
    return {"engine": state.engine.name, "num_layers": cfg.num_decoder_layers,
            "num_heads": cfg.num_heads, "beam_size": cfg.beam_size,
            "limits": dataclasses.asdict(state.limits), "max_batch": state.options.max_batch,
            "max_tokens": state.options.max_tokens}

  @app.get("/health")
  async def health():
    """200 once the first decoding programs are compiled (or read from the cache), else
    503/500; "warm": the background warm-up is done."""
    if state.failed is not None:
      return responses.JSONResponse({"status": "failed", "error": state.failed}, 500)
    if not state.ready.is_set():
      return responses.JSONResponse({"status": "starting"}, 503,
                                    headers={"Retry-After": RETRY_AFTER})
    return {"status": "ready", "engine": state.engine.name, "warm": state.warm.is_set()}

  @app.get("/metrics")
  async def metrics():
    """Prometheus text format."""
    body, content_type = state.metrics.render()
    return responses.Response(body, media_type=content_type)

  @app.get("/", include_in_schema=False)
  async def page():
    return responses.FileResponse(STATIC / "index.html")


def _warm_up(state: _State, warm_up: Optional[Callable[[threading.Event], Any]],
             background: Optional[Callable[[threading.Event], Any]]) -> None:
  try:
    if warm_up is not None:
      start = time.monotonic()
      warm_up(state.stopping)
      log.info("warm-up done in %.1f s", time.monotonic() - start)
    state.ready.set()
  except Exception as e:  # pylint: disable=broad-except  (reported by /health and each request)
    log.exception("warm-up failed")
    state.failed = errors.one_line(e)
    return
  try:
    if background is not None:
      start = time.monotonic()
      background(state.stopping)
      log.info("background warm-up done in %.1f s", time.monotonic() - start)
  except Exception:  # pylint: disable=broad-except  (requests use what was compiled before)
    log.exception("background warm-up failed")
  state.warm.set()


def create_app(engine: Any, options: Options = Options(),
               attention: Optional[Callable[..., dict]] = None,
               warm_up: Optional[Callable[[threading.Event], Any]] = None,
               background: Optional[Callable[[threading.Event], Any]] = None) -> Front:
  """The server for `engine` (engines.py: translate, check, count_pieces, source_tokens, cfg,
  name).

  `warm_up(stop)` runs on a thread of its own at start-up; /health and the
  routes answer 503 until it has returned. Then `background(stop)` runs on that
  thread while requests are served (/health says "warm": true once it has
  returned). `stop` is set when the server stops, which then waits for them to
  return: each should return soon after (a thread killed at exit inside XLA's
  compiler aborts the process).
  `attention(source, target, layer=, head=)` serves the page's heatmap.
  """
  state = _State(engine, options)

  @contextlib.asynccontextmanager
  async def lifespan(_):
    state.batcher.start()
    warming = threading.Thread(target=_warm_up, args=(state, warm_up, background),
                               name="t2t_jax-warm-up", daemon=True)
    warming.start()
    yield
    # uvicorn has answered every request under way; nothing is queued any more.
    state.stopping.set()
    await run_in_threadpool(warming.join)
    await run_in_threadpool(state.batcher.stop)

  app = fastapi.FastAPI(title="t2t_jax translation server", lifespan=lifespan,
                        description="Transformer translation with dynamic batching. "
                                    "Errors are {\"error\": \"one line\"}.")
  app.state.server = state

  @app.exception_handler(starlette_exceptions.HTTPException)
  async def http_error(_, e: starlette_exceptions.HTTPException):
    return _error(protocol.ApiError(e.status_code, str(e.detail), dict(e.headers or {})))

  _translate_route(app)
  _other_routes(app, state, attention)
  app.mount("/static", staticfiles.StaticFiles(directory=STATIC), name="static")
  return Front(app)


class _HttpProtocol(httptools_impl.HttpToolsProtocol):
  """uvicorn's HTTP/1.1 (httptools), whose answer to bytes that are no request (a
  Content-Length shorter than its body leaves some) is {"error"} like ours, not text/plain."""

  def send_400_response(self, msg: str) -> None:
    body = json.dumps({"error": msg}).encode()
    head = [b"HTTP/1.1 400 Bad Request\r\n",
            *(name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers),
            b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n"]
    self.transport.write(b"".join(head) + body)
    self.transport.close()


def serve(app: Front, host: str, port: int, banner: str = "serving on http://{}/") -> None:
  """Runs `app` until SIGTERM or Ctrl-C, then answers the requests under way and returns.

  `banner` is logged with host:port filled in (port 0 takes a free port).
  """
  family = socket.AF_INET6 if ":" in host else socket.AF_INET
  sock = socket.socket(family, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  sock.bind((host, port))
  sock.listen(2048)   # connections made from now on wait for uvicorn's start
  bound = sock.getsockname()
  log.info(banner.format(f"[{bound[0]}]:{bound[1]}" if family == socket.AF_INET6
                         else f"{bound[0]}:{bound[1]}"))
  # uvicorn answers what is under way, then raises the signal again under the handler it
  # found: this one, which only logs, so that the command ends with status 0.
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda number, _: log.info("stopped by %s", signal.Signals(number).name))
  # httptools and uvloop, not h11 and asyncio: less of the front's CPU time per request, and
  # a lone client's requests answered far sooner (docs/benchmarks.md, "Serving").
  # No proxy headers: nothing here reads a client's address.
  config = uvicorn.Config(app, log_level="warning", access_log=False, http=_HttpProtocol,
                          loop="uvloop", proxy_headers=False, timeout_graceful_shutdown=60)
  uvicorn.Server(config).run(sockets=[sock])
