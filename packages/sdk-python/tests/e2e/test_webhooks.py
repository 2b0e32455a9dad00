"""verify_webhook and the receivers on real deliveries of the real dispatcher: a delivery verifies
(standard and legacy headers), a secret rotation's deliveries verify with either secret, each
receiver (aiohttp, ASGI) hands a vote to on_vote once, refuses a tampered request, answers a
redelivery of a handled vote without on_vote, and passes a vote whose on_vote failed on again."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, List, Tuple

import pytest
from aiohttp import web

from botdir import Client, Delivery, VoteEvent, WebhookVerificationError, aiohttp_webhook, asgi_webhook, verify_webhook

from .harness import Recorder, Stack, ThreadedServer, user_id, wait_for

STANDARD = ("webhook-id", "webhook-timestamp", "webhook-signature")


def new_secret() -> str:
    import secrets

    return "whsec_" + secrets.token_hex(32)


def test_a_real_delivery_verifies_with_standard_and_with_legacy_headers(stack: Stack, recorder: Recorder) -> None:
    secret = new_secret()
    bot = stack.webhook_bot(recorder.url(), secret)
    voter = user_id()
    voted_at = stack.vote(bot["id"], voter)["voted_at"]
    delivered = stack.delivered(bot["id"])
    request = wait_for(lambda: recorder.requests[:1], "the delivery")[0]

    verified = verify_webhook(request["body"], request["headers"], secret)
    delivery_id, event, scheme = verified
    assert (delivery_id, scheme) == (delivered["id"], "standard")
    assert event == {"event": "vote.create", "bot_id": bot["id"], "user_id": voter, "voted_at": voted_at}
    # X-Webhook-Trace is sent by dispatchers that trace; when present it is the trace id.
    trace = request["headers"].get("x-webhook-trace")
    assert verified.trace_id == (trace if trace is not None and re.fullmatch("[0-9a-f]{32}", trace) else None)

    legacy = {k: v for k, v in request["headers"].items() if k not in STANDARD}
    assert verify_webhook(request["body"], legacy, secret)[::2] == (delivered["id"], "legacy")
    with pytest.raises(WebhookVerificationError) as caught:
        verify_webhook(request["body"], legacy, new_secret())
    assert caught.value.reason == "invalid_signature"


def test_during_a_secret_rotation_either_secret_verifies(stack: Stack, recorder: Recorder) -> None:
    old = new_secret()
    bot = stack.webhook_bot(recorder.url(), old)
    status, rotated = stack.internal("POST", f"/internal/v1/bots/{bot['id']}/webhook/secret")
    assert status == 200, rotated
    new = rotated["secret"]
    assert new != old
    stack.vote(bot["id"], user_id())
    request = wait_for(lambda: recorder.requests[:1], "the delivery")[0]
    assert len(request["headers"]["webhook-signature"].split(" ")) == 2
    for secrets in (old, new, [new, old], [new_secret(), old]):
        assert verify_webhook(request["body"], request["headers"], secrets).scheme == "standard"
    with pytest.raises(WebhookVerificationError):
        verify_webhook(request["body"], request["headers"], new_secret())
    # Authorization and X-Webhook-Signature-256 carry the new secret at once.
    legacy = {k: v for k, v in request["headers"].items() if k not in STANDARD}
    assert verify_webhook(request["body"], legacy, [old, new]).scheme == "legacy"
    with pytest.raises(WebhookVerificationError):
        verify_webhook(request["body"], legacy, old)


class Handled:
    """on_vote's calls, thread-safe; ``fail`` makes the next n calls raise."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: List[Tuple[VoteEvent, Delivery]] = []
        self.errors: List[BaseException] = []
        self.fail = fail
        self.lock = threading.Lock()

    async def on_vote(self, vote: VoteEvent, delivery: Delivery) -> None:
        with self.lock:
            self.calls.append((vote, delivery))
            if self.fail > 0:
                self.fail -= 1
                raise RuntimeError("the perk could not be granted")

    def on_error(self, error: BaseException, delivery: Delivery) -> None:
        self.errors.append(error)


def asgi_bridge(app: Any) -> Any:
    """aiohttp → ASGI, as an ASGI server (uvicorn, hypercorn) would call the app."""

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        chunks = [body[i : i + 50] for i in range(0, len(body), 50)] or [b""]
        messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
        sent: List[Dict[str, Any]] = []

        async def receive() -> Dict[str, Any]:
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(dict(message))

        scope = {
            "type": "http",
            "method": request.method,
            "path": request.path,
            "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
        }
        await app(scope, receive, send)
        headers = {k.decode(): v.decode() for k, v in sent[0]["headers"] if k.lower() != b"content-length"}
        return web.Response(status=sent[0]["status"], body=b"".join(m.get("body", b"") for m in sent[1:]), headers=headers)

    return handler


def serve(kind: str, secret: str, handled: Handled) -> ThreadedServer:
    app = web.Application()
    if kind == "aiohttp":
        app.router.add_post("/votes", aiohttp_webhook(secret, handled.on_vote, on_error=handled.on_error))
    else:
        app.router.add_post("/votes", asgi_bridge(asgi_webhook(secret, handled.on_vote, on_error=handled.on_error)))
    return ThreadedServer(app)


def post(url: str, body: bytes, headers: Dict[str, str]) -> Tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize("kind", ["aiohttp", "asgi"])
def test_a_receiver_handles_a_real_vote_once_refuses_a_tampered_one_and_a_redelivery_is_not_passed_on(
    stack: Stack, recorder: Recorder, kind: str
) -> None:
    secret = new_secret()
    handled = Handled()
    server = serve(kind, secret, handled)
    try:
        # A genuine request captured first, to tamper with.
        bot = stack.webhook_bot(recorder.url(), secret)
        stack.vote(bot["id"], user_id())
        captured = wait_for(lambda: recorder.requests[:1], "the captured delivery")[0]
        stack.rpc("setWebhookUrl", botId=bot["id"], url=server.base + "/votes")

        voter = user_id()
        stack.vote(bot["id"], voter)
        delivered = stack.delivered(bot["id"], 1)
        assert [(v["user_id"], d.delivery_id) for v, d in handled.calls] == [(voter, delivered["id"])]
        assert handled.calls[0][1].scheme == "standard"

        event = json.loads(captured["body"])
        tampered = json.dumps({**event, "user_id": user_id()}, separators=(",", ":")).encode()
        status, error = post(server.base + "/votes", tampered, captured["headers"])
        assert status == 401 and isinstance(error["error"], str)
        assert len(handled.calls) == 1

        client = Client(base_url=stack.api, token=bot["token"], bot_id=bot["id"])
        assert client.redeliver(delivered["id"])["series"] == 1

        def redelivered() -> Any:
            attempts = [a for a in client.webhook_deliveries() if a["deliveryId"] == delivered["id"] and a["series"] == 1]
            return attempts if attempts and attempts[0]["deliveryState"] == "delivered" else None

        attempts = wait_for(redelivered, "the redelivery to be answered", 60, 0.2)
        assert attempts[0]["statusCode"] == 204
        assert len(handled.calls) == 1
    finally:
        server.close()


@pytest.mark.parametrize("kind", ["aiohttp", "asgi"])
def test_a_vote_whose_on_vote_failed_is_passed_on_again_by_the_retry(stack: Stack, kind: str) -> None:
    secret = new_secret()
    handled = Handled(fail=1)
    server = serve(kind, secret, handled)
    try:
        bot = stack.webhook_bot(server.base + "/votes", secret)
        voter = user_id()
        stack.vote(bot["id"], voter)
        delivered = stack.delivered(bot["id"])
        assert [v["user_id"] for v, _ in handled.calls] == [voter, voter]
        assert [str(e) for e in handled.errors] == ["the perk could not be granted"]
        attempts = Client(base_url=stack.api, token=bot["token"], bot_id=bot["id"]).webhook_deliveries()
        assert [(a["deliveryId"], a["statusCode"]) for a in reversed(attempts)] == [(delivered["id"], 500), (delivered["id"], 204)]
    finally:
        server.close()
