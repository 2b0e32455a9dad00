"""Input a receiver or the retry schedule must refuse or bound rather than fail on."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Dict, List, Tuple

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from botdir import Delivery, VoteEvent, WebhookVerificationError, aiohttp_webhook, asgi_webhook, verify_webhook
from botdir.retry import RetryPolicy, backoff_delay
from botdir.webhook import legacy_signature, standard_signature

SECRET = "whsec_" + "2f" * 16
BODY = b'{"event":"vote.create","bot_id":"123456789012345678","user_id":"876543210987654321","voted_at":"2026-11-27T10:00:00.000Z"}'


async def raw_post(server: TestServer, headers: List[Tuple[bytes, bytes]], body: bytes) -> Tuple[int, bytes]:
    """One HTTP/1.1 request written byte for byte, so a header may carry bytes that are not UTF-8."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    head = b"POST /votes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    head += b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    writer.write(head + body)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    status = int(answer.split(b" ", 2)[1])
    return status, answer.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize(
    "headers",
    [
        [
            (b"webhook-id", b"\xff"),
            (b"webhook-timestamp", str(int(time.time())).encode()),
            (b"webhook-signature", b"v1," + b"A" * 43 + b"="),
        ],
        [(b"X-Webhook-Signature-256", legacy_signature(SECRET, BODY).encode()), (b"Authorization", b"\xff\xfe")],
    ],
    ids=["webhook-id", "authorization"],
)
async def test_aiohttp_header_bytes_that_are_not_utf8_are_a_401(headers: List[Tuple[bytes, bytes]]) -> None:
    errors: List[BaseException] = []
    votes: List[VoteEvent] = []

    async def on_vote(vote: VoteEvent, delivery: Delivery) -> None:
        votes.append(vote)

    app = web.Application()
    app.router.add_post("/votes", aiohttp_webhook(SECRET, on_vote, on_error=lambda e, d: errors.append(e)))
    server = TestServer(app)
    await server.start_server()
    try:
        status, body = await raw_post(server, [(b"Content-Type", b"application/json"), *headers], BODY)
    finally:
        await server.close()
    assert status == 401
    assert "error" in json.loads(body)
    assert votes == [] and errors == []


def test_a_handler_timeout_of_zero_is_refused_at_construction() -> None:
    async def on_vote(vote: VoteEvent, delivery: Delivery) -> None:
        return None

    for make in (asgi_webhook, aiohttp_webhook):
        with pytest.raises(ValueError, match="handler_timeout"):
            make(SECRET, on_vote, handler_timeout=0)


def test_backoff_delay_is_capped_for_any_number_of_attempts() -> None:
    policy = RetryPolicy(attempts=5000, base_delay=0.5, max_delay=30)
    for retry in (1025, 1100, 5000, 10**9):
        assert backoff_delay(retry, policy, lambda: 1.0) == 30
    assert backoff_delay(1, policy, lambda: 1.0) == 0.5


def signed_at(timestamp: str, delivery_id: str = "d-1") -> Dict[str, str]:
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": standard_signature(SECRET, delivery_id, timestamp, BODY),  # type: ignore[arg-type]
    }


@pytest.mark.parametrize(
    "timestamp",
    [
        f"{int(time.time())}\n",
        "".join(chr(0x0660 + int(d)) for d in str(int(time.time()))),  # Arabic-Indic digits
        "".join(chr(0xFF10 + int(d)) for d in str(int(time.time()))),  # full-width digits
    ],
    ids=["trailing-newline", "arabic-indic", "full-width"],
)
def test_a_timestamp_of_other_than_ascii_digits_is_malformed(timestamp: str) -> None:
    with pytest.raises(WebhookVerificationError) as caught:
        verify_webhook(BODY, signed_at(timestamp), SECRET)
    assert caught.value.reason == "malformed_timestamp"


def test_a_trace_id_with_a_trailing_newline_is_not_taken() -> None:
    headers = {**signed_at(str(int(time.time()))), "x-webhook-trace": "0af7651916cd43dd8448eb211c80319c\n"}
    assert verify_webhook(BODY, headers, SECRET).trace_id is None

