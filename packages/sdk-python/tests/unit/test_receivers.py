"""The receivers' answer rules (requests signed here; the e2e suite sends real deliveries):
on_vote runs before the answer and bounded, the id is marked seen only after it returned,
concurrent requests with one id run it once, bodies are capped, refusals are JSON."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from botdir import Delivery, MemorySeenStore, VoteAvailableEvent, VoteEvent, aiohttp_webhook, asgi_webhook
from botdir.webhook import standard_signature

SECRET = "whsec_" + "1e" * 32
TRACE = "0af7651916cd43dd8448eb211c80319c"


def vote_body(user: str = "876543210987654321") -> bytes:
    return json.dumps(
        {"event": "vote.create", "bot_id": "123456789012345678", "user_id": user, "voted_at": "2026-11-27T10:00:00.000Z"},
        separators=(",", ":"),
    ).encode()


def available_body(user: str = "876543210987654321") -> bytes:
    return json.dumps(
        {
            "event": "vote.available",
            "bot_id": "123456789012345678",
            "user_id": user,
            "voted_at": "2026-11-27T10:00:00.000Z",
            "available_at": "2026-11-27T22:00:00.000Z",
        },
        separators=(",", ":"),
    ).encode()


def signed(body: bytes, delivery_id: str = "d-1", secret: str = SECRET) -> Dict[str, str]:
    at = int(time.time())
    return {
        "content-type": "application/json",
        "webhook-id": delivery_id,
        "webhook-timestamp": str(at),
        "webhook-signature": standard_signature(secret, delivery_id, at, body),
        "x-webhook-trace": TRACE,
    }


Post = Callable[[bytes, Dict[str, str]], Awaitable[Tuple[int, Optional[Dict[str, Any]]]]]


class Calls:
    """on_vote's calls, with a script of what each does (None: return; an exception: raise; "hang")."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.calls: List[Tuple[VoteEvent, Delivery]] = []
        self.errors: List[BaseException] = []
        self.release = asyncio.Event()

    async def on_vote(self, vote: VoteEvent, delivery: Delivery) -> None:
        self.calls.append((vote, delivery))
        step = self.script.pop(0) if self.script else None
        if step == "hang":
            await asyncio.sleep(3600)
        if step == "wait":
            await self.release.wait()
        if isinstance(step, BaseException):
            raise step

    def on_error(self, error: BaseException, delivery: Delivery) -> None:
        self.errors.append(error)


async def asgi_post(app: Any, body: bytes, headers: Dict[str, str], chunks: int = 1, declare: bool = True) -> Tuple[int, Optional[Dict[str, Any]]]:
    """One request straight through the ASGI interface, the body in `chunks` messages."""
    pairs = [(k.encode(), v.encode()) for k, v in headers.items()]
    if declare:
        pairs.append((b"content-length", str(len(body)).encode()))
    size = max(1, -(-len(body) // chunks))
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(dict(message))

    scope = {"type": "http", "method": "POST", "path": "/", "headers": pairs}
    await app(scope, receive, send)
    status = sent[0]["status"]
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return status, (json.loads(payload) if payload else None)


@pytest.fixture(params=["asgi", "aiohttp"])
async def make(request: Any) -> Any:
    """Builds a receiver of the parametrised kind and returns a `post` function for it."""
    servers: List[TestServer] = []
    sessions: List[aiohttp.ClientSession] = []

    async def build(calls: Calls, **options: Any) -> Post:
        if request.param == "asgi":
            app = asgi_webhook(SECRET, calls.on_vote, on_error=calls.on_error, **options)

            async def post_asgi(body: bytes, headers: Dict[str, str]) -> Tuple[int, Optional[Dict[str, Any]]]:
                return await asgi_post(app, body, headers, chunks=3)

            return post_asgi
        web_app = web.Application()
        web_app.router.add_post("/votes", aiohttp_webhook(SECRET, calls.on_vote, on_error=calls.on_error, **options))
        server = TestServer(web_app)
        await server.start_server()
        servers.append(server)
        session = aiohttp.ClientSession()
        sessions.append(session)

        async def post_http(body: bytes, headers: Dict[str, str]) -> Tuple[int, Optional[Dict[str, Any]]]:
            async with session.post(server.make_url("/votes"), data=body, headers=headers) as response:
                text = await response.read()
                if text:
                    assert response.headers["content-type"].startswith("application/json")
                return response.status, (json.loads(text) if text else None)

        return post_http

    yield build
    for session in sessions:
        await session.close()
    for server in servers:
        await server.close()


async def test_a_vote_runs_on_vote_before_the_204_and_a_repeat_does_not(make: Any) -> None:
    calls = Calls()
    post = await make(calls)
    body = vote_body()
    assert await post(body, signed(body)) == (204, None)
    assert len(calls.calls) == 1
    vote, delivery = calls.calls[0]
    assert vote["user_id"] == "876543210987654321"
    assert delivery == Delivery("d-1", TRACE, "standard")
    assert await post(body, signed(body)) == (204, None)
    assert len(calls.calls) == 1


async def test_each_vote_event_reaches_its_own_hook_once() -> None:
    votes: List[VoteEvent] = []
    available: List[Tuple[VoteAvailableEvent, Delivery]] = []

    def on_vote(vote: VoteEvent, delivery: Delivery) -> None:
        votes.append(vote)

    async def on_vote_available(event: VoteAvailableEvent, delivery: Delivery) -> None:
        available.append((event, delivery))

    app = asgi_webhook(SECRET, on_vote, on_vote_available=on_vote_available)
    body = available_body()
    assert await asgi_post(app, vote_body(), signed(vote_body(), "d-v")) == (204, None)
    assert await asgi_post(app, body, signed(body, "d-a")) == (204, None)
    assert await asgi_post(app, body, signed(body, "d-a")) == (204, None)
    assert [v["event"] for v in votes] == ["vote.create"]
    assert available == [(json.loads(body), Delivery("d-a", TRACE, "standard"))]
    assert available[0][0]["available_at"] == "2026-11-27T22:00:00.000Z"


async def test_a_receiver_without_a_hook_for_an_event_answers_204_and_ignores_it() -> None:
    calls = Calls()
    only_votes = asgi_webhook(SECRET, calls.on_vote)
    body = available_body()
    assert await asgi_post(only_votes, body, signed(body, "d-x")) == (204, None)
    assert calls.calls == []
    reminders: List[VoteAvailableEvent] = []
    only_available = asgi_webhook(SECRET, on_vote_available=lambda event, _d: reminders.append(event))
    assert await asgi_post(only_available, vote_body(), signed(vote_body(), "d-y")) == (204, None)
    assert await asgi_post(only_available, body, signed(body, "d-z")) == (204, None)
    assert [r["event"] for r in reminders] == ["vote.available"]
    with pytest.raises(ValueError):
        asgi_webhook(SECRET)


async def test_on_vote_raising_is_a_500_and_the_retry_reaches_on_vote_again(make: Any) -> None:
    calls = Calls(RuntimeError("database down"))
    post = await make(calls)
    body = vote_body()
    status, error = await post(body, signed(body))
    assert status == 500 and error is not None and isinstance(error["error"], str)
    assert [str(e) for e in calls.errors] == ["database down"]
    assert await post(body, signed(body)) == (204, None)
    assert len(calls.calls) == 2
    assert await post(body, signed(body)) == (204, None)
    assert len(calls.calls) == 2


async def test_on_vote_past_the_timeout_is_a_500_and_not_marked_seen(make: Any) -> None:
    calls = Calls("hang")
    post = await make(calls, handler_timeout=0.2)
    body = vote_body()
    started = time.monotonic()
    status, _ = await post(body, signed(body))
    assert status == 500 and time.monotonic() - started < 5
    assert isinstance(calls.errors[0], asyncio.TimeoutError)
    assert await post(body, signed(body)) == (204, None)
    assert len(calls.calls) == 2


async def test_two_concurrent_requests_with_one_id_run_on_vote_once_and_answer_the_same(make: Any) -> None:
    calls = Calls("wait")
    post = await make(calls)
    body = vote_body()
    first = asyncio.ensure_future(post(body, signed(body, "same")))
    while not calls.calls:
        await asyncio.sleep(0.01)
    second = asyncio.ensure_future(post(body, signed(body, "same")))
    await asyncio.sleep(0.1)
    assert not second.done()  # it waits for the first's outcome
    calls.release.set()
    assert [a[0] for a in await asyncio.gather(first, second)] == [204, 204]
    assert len(calls.calls) == 1


async def test_concurrent_failure_is_shared_and_the_next_request_runs_again(make: Any) -> None:
    gate = asyncio.Event()
    runs: List[str] = []

    class Failing(Calls):
        async def on_vote(self, vote: VoteEvent, delivery: Delivery) -> None:
            runs.append(delivery.delivery_id)
            if len(runs) == 1:
                await gate.wait()
                raise RuntimeError("first run fails")

    calls = Failing()
    post = await make(calls)
    body = vote_body()
    first = asyncio.ensure_future(post(body, signed(body, "x")))
    while not runs:
        await asyncio.sleep(0.01)
    second = asyncio.ensure_future(post(body, signed(body, "x")))
    await asyncio.sleep(0.1)
    gate.set()
    assert [a[0] for a in await asyncio.gather(first, second)] == [500, 500]
    assert runs == ["x"]
    assert (await post(body, signed(body, "x")))[0] == 204
    assert runs == ["x", "x"]


async def test_refusals_are_json_and_never_reach_on_vote(make: Any) -> None:
    calls = Calls()
    post = await make(calls, max_body=1024)
    body = vote_body()
    status, error = await post(body + b" ", signed(body))
    assert status == 401 and error is not None and "signature" in error["error"]
    status, error = await post(body, signed(body, secret="whsec_" + "aa" * 32))
    assert status == 401
    big = b'{"event":"vote.create","pad":"' + b"x" * 2000 + b'"}'
    status, error = await post(big, signed(big))
    assert status == 413 and error == {"error": "The request body is too large."}
    not_event = b"[1]"
    assert (await post(not_event, signed(not_event)))[0] == 400
    test_event = b'{"event":"webhook.test","bot_id":"1","test":true,"sent_at":"x"}'
    assert await post(test_event, signed(test_event, "t")) == (204, None)
    assert calls.calls == []


async def test_the_asgi_cap_holds_without_content_length() -> None:
    calls = Calls()
    app = asgi_webhook(SECRET, calls.on_vote, max_body=100)
    big = b"x" * 5000
    assert (await asgi_post(app, big, signed(big), chunks=50, declare=False))[0] == 413
    small = vote_body()
    assert (await asgi_post(app, small, signed(small), chunks=1, declare=False))[0] == 413  # 121 bytes > 100
    app = asgi_webhook(SECRET, calls.on_vote)
    assert (await asgi_post(app, small, signed(small), chunks=4, declare=False))[0] == 204


async def test_the_aiohttp_cap_holds_for_a_chunked_body() -> None:
    calls = Calls()
    web_app = web.Application()
    web_app.router.add_post("/", aiohttp_webhook(SECRET, calls.on_vote, max_body=100))
    server = TestServer(web_app)
    await server.start_server()
    try:

        async def chunks() -> Any:
            for _ in range(50):
                yield b"x" * 100

        async with aiohttp.ClientSession() as session:
            async with session.post(server.make_url("/"), data=chunks(), headers=signed(b"")) as response:
                assert response.status == 413
                assert await response.json() == {"error": "The request body is too large."}
    finally:
        await server.close()


async def test_a_seen_store_that_fails_is_a_503_and_on_vote_does_not_run() -> None:
    class Down(MemorySeenStore):
        def contains(self, delivery_id: str) -> bool:
            raise ConnectionError("redis down")

    calls = Calls()
    app = asgi_webhook(SECRET, calls.on_vote, seen=Down(), on_error=calls.on_error)
    body = vote_body()
    assert (await asgi_post(app, body, signed(body)))[0] == 503
    assert calls.calls == []


async def test_options_are_checked() -> None:
    calls = Calls()
    for bad in ({"tolerance": float("inf")}, {"tolerance": -1}, {"handler_timeout": float("nan")}, {"max_body": -1}):
        with pytest.raises(ValueError):
            asgi_webhook(SECRET, calls.on_vote, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        asgi_webhook("", calls.on_vote)


async def test_memory_store_forgets_the_least_recently_seen() -> None:
    store = MemorySeenStore(capacity=2)
    store.add("a")
    store.add("b")
    assert store.contains("a")
    store.add("c")
    assert store.contains("a") and store.contains("c") and not store.contains("b")
