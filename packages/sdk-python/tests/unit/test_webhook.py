"""verify_webhook's reasons, its tolerance and the trace id (requests signed here)."""

from __future__ import annotations

import email.message
import json
import math
import time
from typing import Dict, Optional

import pytest

from botdir import WEBHOOK_VERIFICATION_REASONS, WebhookVerificationError, verify_webhook
from botdir.webhook import legacy_signature, standard_signature

SECRET = "whsec_" + "0f" * 32
BODY = b'{"event":"vote.create","bot_id":"123456789012345678","user_id":"876543210987654321","voted_at":"2026-11-27T10:00:00.000Z"}'


def signed(body: bytes = BODY, secret: str = SECRET, at: Optional[int] = None, delivery_id: str = "d-1") -> Dict[str, str]:
    timestamp = int(time.time()) if at is None else at
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": standard_signature(secret, delivery_id, timestamp, body),
    }


def reason(body: bytes, headers: Dict[str, str], **kwargs: object) -> str:
    with pytest.raises(WebhookVerificationError) as caught:
        verify_webhook(body, headers, SECRET, **kwargs)  # type: ignore[arg-type]
    assert caught.value.reason in WEBHOOK_VERIFICATION_REASONS
    assert SECRET not in str(caught.value)
    return caught.value.reason


def test_a_fresh_signed_request_verifies_with_any_header_case() -> None:
    headers = {k.upper(): v for k, v in signed().items()}
    delivery_id, event, scheme = verify_webhook(BODY, headers, SECRET)
    assert (delivery_id, scheme, event["event"]) == ("d-1", "standard", "vote.create")
    # The ASGI form: (name, value) byte pairs.
    pairs = [(k.encode(), v.encode()) for k, v in signed().items()]
    assert verify_webhook(BODY, pairs, SECRET).delivery_id == "d-1"
    # http.server's self.headers.
    message = email.message.Message()
    for name, value in signed().items():
        message[name.title()] = value
    assert verify_webhook(BODY, message, SECRET).delivery_id == "d-1"
    # Lists of values (repeated headers), joined as one.
    listed = {**{k: [v] for k, v in signed().items()}, "webhook-signature": ["v1,bm90", signed()["webhook-signature"]]}
    assert verify_webhook(BODY, listed, SECRET).delivery_id == "d-1"


def test_every_reason() -> None:
    assert reason(BODY, {}) == "missing_signature"
    partial = signed()
    del partial["webhook-signature"]
    assert reason(BODY, partial) == "missing_signature"
    assert reason(BODY, {**signed(), "webhook-timestamp": "soon"}) == "malformed_timestamp"
    assert reason(BODY, signed(at=int(time.time()) - 301)) == "timestamp_out_of_tolerance"
    assert reason(BODY, signed(at=int(time.time()) + 301)) == "timestamp_out_of_tolerance"
    assert reason(BODY + b" ", signed()) == "invalid_signature"
    assert reason(BODY, {**signed(), "webhook-signature": "v1,bm90IGEgbWFj v2,abc"}) == "invalid_signature"
    legacy = {"x-webhook-signature-256": legacy_signature(SECRET, BODY), "authorization": "whsec_wrong"}
    assert reason(BODY, legacy) == "invalid_authorization"
    assert reason(BODY, {**legacy, "x-webhook-signature-256": "sha256=" + "0" * 64}) == "invalid_signature"
    not_event = b'["vote.create"]'
    assert reason(not_event, signed(not_event)) == "invalid_body"


def test_tolerance_is_the_window_and_must_be_finite_and_not_negative() -> None:
    old = signed(at=int(time.time()) - 3600)
    assert verify_webhook(BODY, old, SECRET, tolerance=3700).scheme == "standard"
    assert reason(BODY, old, tolerance=10) == "timestamp_out_of_tolerance"
    exact = signed(at=1_000)
    assert verify_webhook(BODY, exact, SECRET, tolerance=0, now=1_000.9).delivery_id == "d-1"
    for bad in (math.inf, -math.inf, math.nan, -1, True, "300"):
        with pytest.raises(ValueError):
            verify_webhook(BODY, signed(), SECRET, tolerance=bad)  # type: ignore[arg-type]


def test_no_secret_is_a_value_error() -> None:
    for secrets in ("", [], [""]):
        with pytest.raises(ValueError):
            verify_webhook(BODY, signed(), secrets)


def test_trace_id_is_the_header_when_it_is_32_lowercase_hex_and_none_otherwise() -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert verify_webhook(BODY, {**signed(), "X-Webhook-Trace": trace}, SECRET).trace_id == trace
    assert verify_webhook(BODY, signed(), SECRET).trace_id is None
    for bad in (trace.upper(), trace[:-1], trace + "0", f"00-{trace}-00f067aa0ba902b7-01", ""):
        assert verify_webhook(BODY, {**signed(), "x-webhook-trace": bad}, SECRET).trace_id is None
    # Not part of the signature: any value leaves the signature valid.
    assert verify_webhook(BODY, {**signed(), "x-webhook-trace": "x"}, SECRET).scheme == "standard"


def test_legacy_without_delivery_id_and_test_events() -> None:
    test_event = json.dumps({"event": "webhook.test", "bot_id": "1", "test": True, "sent_at": "x"}).encode()
    verified = verify_webhook(
        test_event,
        {"x-webhook-signature-256": legacy_signature(SECRET, test_event), "authorization": SECRET},
        SECRET,
    )
    assert (verified.delivery_id, verified.scheme, verified.event["event"]) == ("", "legacy", "webhook.test")
