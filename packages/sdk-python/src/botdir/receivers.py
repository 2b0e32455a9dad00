"""Receivers of vote webhooks: an aiohttp handler and a framework-free ASGI app.

Both read the raw body with a cap (413 beyond it), verify it (``verify_webhook``; 401, or 400 for a
signed body that is no webhook event, with a JSON error body), and run ``on_vote`` *before*
answering, bounded by ``handler_timeout``:

- ``on_vote`` returned: the delivery id is marked seen and the answer is 204;
- ``on_vote`` raised or timed out: 500 with the JSON error body, the id is not marked seen, so
  the directory's retry (or a manual redelivery) reaches ``on_vote`` again; ``on_error`` is told;
- a delivery id already marked seen: 204 without ``on_vote``;
- two concurrent requests with one delivery id run ``on_vote`` once: the second awaits the
  first's outcome and answers the same.

Test events (``webhook.test``) and kinds the receiver does not handle are answered 204.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    MutableMapping,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    Union,
    cast,
)

from .errors import WebhookVerificationError
from .models import VoteAvailableEvent, VoteEvent, VoteWebhookPayload
from .webhook import DEFAULT_TOLERANCE, VerifiedWebhook, WebhookHeaders, verify_webhook

__all__ = [
    "DEFAULT_HANDLER_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "Delivery",
    "SeenStore",
    "MemorySeenStore",
    "WebhookReceiver",
    "aiohttp_webhook",
    "asgi_webhook",
]

logger = logging.getLogger("botdir")

#: Seconds ``on_vote`` may take before the request is answered 500 (well under the directory's 10 s).
DEFAULT_HANDLER_TIMEOUT = 8.0
#: Largest body read, in bytes; a longer one is answered 413.
DEFAULT_MAX_BODY = 64 * 1024


@dataclass(frozen=True)
class Delivery:
    """What ``on_vote`` is told besides the vote: the delivery id, the directory's trace id, the scheme."""

    delivery_id: str
    trace_id: Optional[str]
    scheme: str


class SeenStore(Protocol):
    """Remembers handled delivery ids. Methods may be coroutines (a database, Redis)."""

    def contains(self, delivery_id: str) -> Union[bool, Awaitable[bool]]: ...

    def add(self, delivery_id: str) -> Union[None, Awaitable[None]]: ...


class MemorySeenStore:
    """The default store: the last ``capacity`` ids in memory, least recently seen forgotten first.

    Use a shared one (a unique key in your database, Redis ``SET id 1 EX 86400``) when several
    copies of the receiver run.
    """

    def __init__(self, capacity: int = 10_000) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._ids: "OrderedDict[str, None]" = OrderedDict()

    def contains(self, delivery_id: str) -> bool:
        if delivery_id in self._ids:
            self._ids.move_to_end(delivery_id)
            return True
        return False

    def add(self, delivery_id: str) -> None:
        self._ids[delivery_id] = None
        self._ids.move_to_end(delivery_id)
        while len(self._ids) > self._capacity:
            self._ids.popitem(last=False)


OnVote = Callable[[VoteEvent, Delivery], Union[Awaitable[Any], Any]]
OnVoteAvailable = Callable[[VoteAvailableEvent, Delivery], Union[Awaitable[Any], Any]]
OnError = Callable[[BaseException, Delivery], Any]

#: (status, JSON error sentence or None for an empty answer)
Answer = Tuple[int, Optional[str]]

_TOO_LARGE: Answer = (413, "The request body is too large.")
_FAILED: Answer = (500, "The vote could not be handled; it will be delivered again.")
_STORE_DOWN: Answer = (503, "The delivery could not be checked; retry later.")


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


def _default_on_error(error: BaseException, delivery: Delivery) -> None:
    logger.error("on_vote failed for delivery %s", delivery.delivery_id, exc_info=error)


class WebhookReceiver:
    """The answer rules both adapters share; ``await receiver.handle(body, headers)`` gives ``(status, error)``."""

    def __init__(
        self,
        secret: Union[str, Sequence[str]],
        on_vote: Optional[OnVote] = None,
        *,
        on_vote_available: Optional[OnVoteAvailable] = None,
        seen: Optional[SeenStore] = None,
        tolerance: float = DEFAULT_TOLERANCE,
        handler_timeout: float = DEFAULT_HANDLER_TIMEOUT,
        on_error: Optional[OnError] = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        if not secret or (not isinstance(secret, str) and not [s for s in secret if s]):
            raise ValueError("a webhook receiver needs the webhook secret")
        for name, value in (("tolerance", tolerance), ("handler_timeout", handler_timeout)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number of seconds >= 0")
        if handler_timeout == 0:  # on_vote would never get to run: every vote would answer 500
            raise ValueError("handler_timeout must be a finite number of seconds > 0")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ValueError("max_body must be a whole number of bytes >= 0")
        if on_vote is None and on_vote_available is None:
            raise ValueError("a webhook receiver needs on_vote, on_vote_available or both")
        for name, hook in (("on_vote", on_vote), ("on_vote_available", on_vote_available)):
            if hook is not None and not callable(hook):
                raise ValueError(f"{name} must be callable")
        self.secret = secret
        self.on_vote = on_vote
        self.on_vote_available = on_vote_available
        self.seen: SeenStore = seen if seen is not None else MemorySeenStore()
        self.tolerance = tolerance
        self.handler_timeout = float(handler_timeout)
        self.on_error: OnError = on_error if on_error is not None else _default_on_error
        self.max_body = max_body
        self._in_flight: Dict[str, "asyncio.Future[Answer]"] = {}

    async def handle(self, body: bytes, headers: WebhookHeaders) -> Answer:
        """The answer to one request whose body was read whole (and within ``max_body``)."""
        if len(body) > self.max_body:
            return _TOO_LARGE
        try:
            verified = verify_webhook(body, headers, self.secret, self.tolerance)
        except WebhookVerificationError as error:
            return (400 if error.reason == "invalid_body" else 401, error.message)
        event = verified.event
        kind = event.get("event")
        # Test events and kinds without a hook here are acknowledged and ignored.
        if not ((kind == "vote.create" and self.on_vote) or (kind == "vote.available" and self.on_vote_available)):
            return (204, None)
        vote = cast(VoteWebhookPayload, event)
        # A legacy request without X-Webhook-Delivery is keyed on the vote itself, as the spec allows.
        key = verified.delivery_id or f"{kind}:{vote.get('user_id')}@{vote.get('voted_at')}"
        return await self._once(key, vote, verified)

    async def _once(self, key: str, vote: VoteWebhookPayload, verified: VerifiedWebhook) -> Answer:
        running = self._in_flight.get(key)
        if running is not None:
            return await asyncio.shield(running)
        try:
            seen = bool(await _maybe_await(self.seen.contains(key)))
        except Exception as error:  # the store is down: a repeat cannot be told from a first delivery
            self._report(error, verified)
            return _STORE_DOWN
        if seen:
            return (204, None)
        running = self._in_flight.get(key)  # another request may have started while the store answered
        if running is not None:
            return await asyncio.shield(running)
        outcome: "asyncio.Future[Answer]" = asyncio.get_running_loop().create_future()
        self._in_flight[key] = outcome
        answer: Answer = _FAILED
        try:
            answer = await self._run(key, vote, verified)
        finally:
            del self._in_flight[key]
            outcome.set_result(answer)
        return answer

    def _call(self, vote: VoteWebhookPayload, delivery: Delivery) -> Any:
        if vote["event"] == "vote.available":
            on_available = self.on_vote_available
            return on_available(cast(VoteAvailableEvent, vote), delivery) if on_available else None
        on_vote = self.on_vote
        return on_vote(cast(VoteEvent, vote), delivery) if on_vote else None

    async def _run(self, key: str, vote: VoteWebhookPayload, verified: VerifiedWebhook) -> Answer:
        delivery = Delivery(verified.delivery_id, verified.trace_id, verified.scheme)
        try:
            await asyncio.wait_for(_maybe_await(self._call(vote, delivery)), timeout=self.handler_timeout)
        except Exception as error:  # on_vote raised, or asyncio.TimeoutError
            self._report(error, verified)
            return _FAILED
        try:
            await _maybe_await(self.seen.add(key))
        except Exception as error:
            # on_vote did its work: a 500 would make the directory run it again.
            self._report(error, verified)
        return (204, None)

    def _report(self, error: BaseException, verified: VerifiedWebhook) -> None:
        try:
            self.on_error(error, Delivery(verified.delivery_id, verified.trace_id, verified.scheme))
        except Exception:  # a failing hook must not change the answer
            logger.exception("on_error failed")


def _error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode("utf-8")


def _receiver(
    secret: Union[str, Sequence[str]],
    on_vote: Optional[OnVote],
    on_vote_available: Optional[OnVoteAvailable],
    seen: Optional[SeenStore],
    tolerance: float,
    handler_timeout: float,
    on_error: Optional[OnError],
    max_body: int,
) -> WebhookReceiver:
    return WebhookReceiver(
        secret,
        on_vote,
        on_vote_available=on_vote_available,
        seen=seen,
        tolerance=tolerance,
        handler_timeout=handler_timeout,
        on_error=on_error,
        max_body=max_body,
    )


def _declared_length(value: Optional[str]) -> Optional[int]:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


# --- aiohttp -------------------------------------------------------------------------------------

def aiohttp_webhook(
    secret: Union[str, Sequence[str]],
    on_vote: Optional[OnVote] = None,
    *,
    on_vote_available: Optional[OnVoteAvailable] = None,
    seen: Optional[SeenStore] = None,
    tolerance: float = DEFAULT_TOLERANCE,
    handler_timeout: float = DEFAULT_HANDLER_TIMEOUT,
    on_error: Optional[OnError] = None,
    max_body: int = DEFAULT_MAX_BODY,
) -> Callable[[Any], Awaitable[Any]]:
    """An aiohttp request handler: ``app.router.add_post("/webhooks/votes", aiohttp_webhook(secret=..., on_vote=...))``."""
    from aiohttp import web

    receiver = _receiver(secret, on_vote, on_vote_available, seen, tolerance, handler_timeout, on_error, max_body)

    def respond(answer: Answer) -> web.Response:
        status, message = answer
        if message is None:
            return web.Response(status=status)
        return web.Response(status=status, body=_error_body(message), content_type="application/json", charset="utf-8")

    async def handler(request: web.Request) -> web.Response:
        declared = request.content_length
        if declared is not None and declared > receiver.max_body:
            return respond(_TOO_LARGE)
        chunks: List[bytes] = []
        size = 0
        while True:
            chunk = await request.content.read(65536)
            if not chunk:
                break
            size += len(chunk)
            if size > receiver.max_body:
                return respond(_TOO_LARGE)
            chunks.append(chunk)
        return respond(await receiver.handle(b"".join(chunks), request.headers))

    handler.receiver = receiver  # type: ignore[attr-defined]
    return handler


# --- ASGI ----------------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _AsgiWebhook:
    """The ASGI app ``asgi_webhook`` returns (any path it is mounted on; POST only)."""

    def __init__(self, receiver: WebhookReceiver) -> None:
        self.receiver = receiver

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            raise RuntimeError(f"asgi_webhook serves HTTP, not {scope['type']}")
        if scope.get("method") != "POST":
            await self._send(send, (405, "Webhooks are POST requests."), [(b"allow", b"POST")])
            return
        headers: Iterable[Tuple[bytes, bytes]] = scope.get("headers") or []
        header_list = list(headers)
        declared = _declared_length(
            next((v.decode("latin-1") for k, v in header_list if k.lower() == b"content-length"), None)
        )
        if declared is not None and declared > self.receiver.max_body:
            await self._send(send, _TOO_LARGE)
            return
        chunks: List[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = bytes(message.get("body") or b"")
            size += len(chunk)
            if size > self.receiver.max_body:
                await self._send(send, _TOO_LARGE)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        await self._send(send, await self.receiver.handle(b"".join(chunks), header_list))

    @staticmethod
    async def _send(send: Send, answer: Answer, extra: Optional[List[Tuple[bytes, bytes]]] = None) -> None:
        status, message = answer
        body = b"" if message is None else _error_body(message)
        headers: List[Tuple[bytes, bytes]] = list(extra or [])
        if message is not None:
            headers.append((b"content-type", b"application/json; charset=utf-8"))
        headers.append((b"content-length", str(len(body)).encode("ascii")))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def asgi_webhook(
    secret: Union[str, Sequence[str]],
    on_vote: Optional[OnVote] = None,
    *,
    on_vote_available: Optional[OnVoteAvailable] = None,
    seen: Optional[SeenStore] = None,
    tolerance: float = DEFAULT_TOLERANCE,
    handler_timeout: float = DEFAULT_HANDLER_TIMEOUT,
    on_error: Optional[OnError] = None,
    max_body: int = DEFAULT_MAX_BODY,
) -> _AsgiWebhook:
    """A framework-free ASGI app: ``app.mount("/webhooks/votes", asgi_webhook(secret=..., on_vote=...))`` (FastAPI, Starlette)."""
    return _AsgiWebhook(_receiver(secret, on_vote, on_vote_available, seen, tolerance, handler_timeout, on_error, max_body))
