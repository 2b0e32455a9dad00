"""The running stack (e2e/src/python/stack.ts) and the servers the end-to-end tests start.

``Stack`` spawns the Node harness, which starts PostgreSQL's test database, a private Redis and the
three apps from ``dist/``, and talks to it over its stdin/stdout (one JSON object a line).
``ThreadedServer`` runs an aiohttp app on a loop of its own in a thread, so that a test may block
(the synchronous client) while the dispatcher delivers to it or a proxy forwards for it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import random
import shutil
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import aiohttp
from aiohttp import web

from ..conftest import REPO_ROOT

START_DEADLINE = 240.0
APPS = ("api", "vote-ingest", "webhook-dispatcher")


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Polls ``check`` until it returns something truthy (a positive signal), with a deadline."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def http(method: str, url: str, body: Any = None, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Any]:
    """A plain JSON request (no SDK): status and parsed body."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


class Stack:
    def __init__(self) -> None:
        missing = [app for app in APPS if not (REPO_ROOT / "apps" / app / "dist" / "main.js").exists()]
        if missing:
            raise RuntimeError(f"apps/{missing[0]}/dist is missing: run `pnpm build` (pnpm test:python does)")
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is not on PATH")
        self._log = tempfile.NamedTemporaryFile(prefix="botdir-python-stack-", suffix=".log", delete=False)
        self._process = subprocess.Popen(
            [node, "--import", "tsx", "e2e/src/python/stack.ts"],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._pending: Dict[int, "queue.Queue[Dict[str, Any]]"] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        first = self._next_line(START_DEADLINE)
        if not first.get("ready"):
            raise RuntimeError(f"the stack did not start: {first}\n{self.log_tail()}")
        self.api: str = first["api"]
        self.ingest: str = first["ingest"]
        self.internal_key: str = first["internalKey"]

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _next_line(self, timeout: float) -> Dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"the stack said nothing for {timeout} s\n{self.log_tail()}") from None
        if line is None:
            raise RuntimeError(f"the stack exited\n{self.log_tail()}")
        parsed: Dict[str, Any] = json.loads(line)
        return parsed

    def log_tail(self) -> str:
        with open(self._log.name, "rb") as log:
            return log.read()[-4000:].decode(errors="replace")

    def rpc(self, op: str, **fields: Any) -> Any:
        with self._lock:  # one command at a time: answers come back in order
            command_id = next(self._ids)
            assert self._process.stdin is not None
            self._process.stdin.write((json.dumps({"id": command_id, "op": op, **fields}) + "\n").encode())
            self._process.stdin.flush()
            answer = self._next_line(120)
        if answer.get("id") != command_id or "error" in answer:
            raise RuntimeError(f"{op}: {answer}")
        return answer["result"]

    def known_bot(self) -> Dict[str, str]:
        bot: Dict[str, str] = self.rpc("knownBot")
        return bot

    def webhook_bot(self, url: str, secret: str) -> Dict[str, str]:
        bot: Dict[str, str] = self.rpc("webhookBot", url=url, secret=secret)
        return bot

    def deliveries(self, bot_id: str) -> List[Dict[str, str]]:
        found: List[Dict[str, str]] = self.rpc("deliveries", botId=bot_id)
        return found

    def internal(self, method: str, path: str, body: Any = None) -> Tuple[int, Any]:
        return http(method, self.ingest + path, body, {"authorization": self.internal_key})

    def vote(self, bot_id: str, user_id: str) -> Dict[str, Any]:
        status, body = self.internal("POST", "/internal/v1/votes", {"bot_id": bot_id, "user_id": user_id})
        assert status == 201, (status, body)
        vote: Dict[str, Any] = body["vote"]
        return vote

    def server_count(self, bot_id: str) -> Optional[int]:
        status, body = self.internal("GET", f"/internal/v1/bots/{bot_id}")
        assert status == 200, (status, body)
        count = body.get("server_count", body.get("serverCount"))
        return None if count is None else int(count)

    def delivered(self, bot_id: str, index: int = 0, timeout: float = 60) -> Dict[str, str]:
        """The bot's ``index``-th delivery once it is delivered."""

        def check() -> Optional[Dict[str, str]]:
            found = self.deliveries(bot_id)
            return found[index] if len(found) > index and found[index]["state"] == "delivered" else None

        found: Dict[str, str] = wait_for(check, f"delivery {index} of bot {bot_id}", timeout, 0.1)
        return found

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()
        os.unlink(self._log.name)


class ThreadedServer:
    """An aiohttp app served on 127.0.0.1 (a free port) from a thread with a loop of its own."""

    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app)
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        started.wait(30)
        self.base = f"http://127.0.0.1:{self.port}"

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        server = site._server
        assert server is not None
        self.port: int = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        started.set()
        self.loop.run_forever()

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def close(self) -> None:
        self.run(self._runner.cleanup())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


Scripted = Union[str, Tuple[int, Any, Dict[str, str]]]


class ScriptedProxy:
    """A proxy in front of the real API: scripted answers first (an answer, ``"reset"`` to drop the
    connection, ``"forward-503"`` to forward and then answer 503), then forwards. Logs every request."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.requests: List[Dict[str, Any]] = []
        self._script: List[Scripted] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.server = ThreadedServer(app)
        self.base = self.server.base
        self._session: Optional[aiohttp.ClientSession] = None

    def script(self, *steps: Scripted) -> None:
        self._script.extend(steps)

    def to(self, bot_id: str) -> List[Any]:
        return [r["answer"] for r in self.requests if bot_id in r["path"]]

    async def _forward(self, request: web.Request, body: bytes) -> web.Response:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type", "accept")}
        async with self._session.request(request.method, self.target + request.path_qs, data=body, headers=headers) as answer:
            payload = await answer.read()
            keep = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "retry-after", "x-botdir-conflict")}
            return web.Response(status=answer.status, body=payload, headers=keep)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        entry: Dict[str, Any] = {"method": request.method, "path": request.path_qs, "answer": None}
        self.requests.append(entry)
        step = self._script.pop(0) if self._script else None
        if step == "reset":
            entry["answer"] = "reset"
            assert request.transport is not None
            request.transport.abort()
            raise web.HTTPInternalServerError()
        if step == "forward-503":
            forwarded = await self._forward(request, body)
            entry["answer"] = f"{forwarded.status}→503"
            return web.json_response({"error": "The service is unavailable."}, status=503)
        if isinstance(step, tuple):
            status, payload, headers = step
            entry["answer"] = status
            if isinstance(payload, (bytes, str)):
                return web.Response(status=status, body=payload, headers=headers)
            return web.json_response(payload, status=status, headers=headers)
        forwarded = await self._forward(request, body)
        entry["answer"] = forwarded.status
        return forwarded

    def close(self) -> None:
        if self._session is not None:
            self.server.run(self._session.close())
        self.server.close()


class Recorder:
    """A webhook receiver that records every request and answers 204, or waits while `hold` is set."""

    def __init__(self) -> None:
        self.requests: List[Dict[str, Any]] = []
        self.hold = threading.Event()
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        self.server = ThreadedServer(app)

    def url(self, path: str = "/hook") -> str:
        return self.server.base + path

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append({"path": request.path, "headers": {k.lower(): v for k, v in request.headers.items()}, "body": body})
        while self.hold.is_set():
            await asyncio.sleep(0.02)
        return web.Response(status=204)

    def close(self) -> None:
        self.hold.clear()
        self.server.close()


def user_id() -> str:
    """A random chat-platform user id."""
    return "1" + "".join(random.choice("0123456789") for _ in range(17))
