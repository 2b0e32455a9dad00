"""Verification of the directory's webhook requests (standard library only).

Standard Webhooks (https://www.standardwebhooks.com) first: ``webhook-signature`` holds one or more
space-separated ``v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<raw body>">``; two
during a secret rotation, so a receiver that holds either secret accepts. The key is the secret's
part after ``whsec_``, base64-decoded (the dispatcher's derivation). A request without those
headers falls back to the directory's own ``X-Webhook-Signature-256: sha256=<hex HMAC of the raw
body>`` (keyed with the secret's UTF-8 bytes) plus ``Authorization`` (the secret itself).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import re
import time
from email.message import Message
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union, cast

from .errors import WebhookVerificationError
from .models import WebhookEvent

__all__ = [
    "DEFAULT_TOLERANCE",
    "VerifiedWebhook",
    "WebhookHeaders",
    "verify_webhook",
    "standard_signature",
    "legacy_signature",
]

#: Largest accepted distance between ``webhook-timestamp`` and this clock, in seconds.
DEFAULT_TOLERANCE = 300

SECRET_PREFIX = "whsec_"
# Matched whole with fullmatch, and ASCII digits spelled out: `$` accepts a trailing newline and
# `\d` matches any Unicode digit (int() reads "١٧٠٠" as 1700).
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_LEGACY = re.compile(r"sha256=[0-9a-fA-F]{64}")
_TRACE_ID = re.compile(r"[0-9a-f]{32}")

#: A mapping of header names to values (any letter case; aiohttp's ``request.headers``, a dict,
#: Starlette's ``request.headers``), an ``email.message.Message`` (``http.server``'s
#: ``self.headers``), or the ``(name, value)`` pairs of an ASGI scope (bytes or str).
WebhookHeaders = Union[
    Mapping[str, str],
    Mapping[str, Sequence[str]],
    Iterable[Tuple[Union[str, bytes], Union[str, bytes]]],
    Message,
]


class VerifiedWebhook(Tuple[str, WebhookEvent, str]):
    """``(delivery_id, event, scheme)``, plus ``trace_id``.

    ``delivery_id``: ``webhook-id`` (= ``X-Webhook-Delivery``), stable across retries and
    redeliveries: de-duplicate on it. ``event``: the parsed body. ``scheme``: ``"standard"`` or
    ``"legacy"``. ``trace_id``: the ``X-Webhook-Trace`` header (the directory's trace id, 32
    lowercase hex characters), or None when it is absent or not that.
    """

    trace_id: Optional[str]

    def __new__(
        cls, delivery_id: str, event: WebhookEvent, scheme: str, trace_id: Optional[str] = None
    ) -> "VerifiedWebhook":
        fields: Any = (delivery_id, event, scheme)
        self = super().__new__(cls, fields)
        self.trace_id = trace_id
        return self

    @property
    def delivery_id(self) -> str:
        return self[0]

    @property
    def event(self) -> WebhookEvent:
        return self[1]

    @property
    def scheme(self) -> str:
        return self[2]

    def __repr__(self) -> str:
        return (
            f"VerifiedWebhook(delivery_id={self[0]!r}, event={self[1]!r}, scheme={self[2]!r}, "
            f"trace_id={self.trace_id!r})"
        )


def _text(value: Union[str, bytes]) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _utf8(value: str) -> bytes:
    """A header value's bytes for hashing. aiohttp hands bytes that are not UTF-8 over as lone
    surrogates (``\\udcff``), which strict UTF-8 cannot encode: they are kept as they came, so such
    a value only fails to match, a 401, never an exception."""
    return value.encode("utf-8", "surrogatepass")


class _Headers:
    """Case-insensitive lookup; repeated headers are joined with a space."""

    def __init__(self, headers: WebhookHeaders) -> None:
        self._values: Dict[str, List[str]] = {}
        getall = getattr(headers, "getall", None)
        if getall is not None and isinstance(headers, Mapping):  # aiohttp's CIMultiDict
            for name in headers.keys():
                self._values.setdefault(_text(name).lower(), [str(v) for v in getall(name)])
            return
        items = getattr(headers, "items", None)
        # A mapping, email.message.Message (http.server), Starlette's Headers: (name, value) items;
        # otherwise (name, value) pairs as an ASGI scope holds them.
        pairs: Iterable[Tuple[Any, Any]] = items() if callable(items) else cast(Iterable[Tuple[Any, Any]], headers)
        for name, value in pairs:
            values = [value] if isinstance(value, (str, bytes)) else list(value)
            self._values.setdefault(_text(name).lower(), []).extend(_text(v) for v in values)

    def get(self, name: str) -> Optional[str]:
        values = self._values.get(name)
        return None if values is None else " ".join(values)


def _tolerance(value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("tolerance must be a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise ValueError("tolerance must be a finite number of seconds >= 0")
    return float(value)


def _secrets(secret: Union[str, Sequence[str]]) -> List[str]:
    secrets = [secret] if isinstance(secret, str) else list(secret)
    secrets = [s for s in secrets if isinstance(s, str) and s]
    if not secrets:
        raise ValueError("verify_webhook needs the webhook secret")
    return secrets


def standard_key(secret: str) -> bytes:
    """The Standard Webhooks HMAC key of a secret: the base64-decoded part after ``whsec_``."""
    encoded = secret[len(SECRET_PREFIX) :] if secret.startswith(SECRET_PREFIX) else secret
    if encoded and _BASE64.fullmatch(encoded):
        try:
            return base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            pass
    return secret.encode("utf-8")


def standard_signature(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64>``: the Standard Webhooks signature of one message under one secret."""
    message = _utf8(f"{delivery_id}.{timestamp}.") + body
    mac = hmac.new(standard_key(secret), message, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def legacy_signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: the ``X-Webhook-Signature-256`` value of a body under one secret."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify_webhook(
    body: Union[bytes, bytearray, memoryview, str],
    headers: WebhookHeaders,
    secret: Union[str, Sequence[str]],
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    now: Optional[float] = None,
) -> VerifiedWebhook:
    """Checks a webhook request; returns ``(delivery_id, event, scheme)`` (a ``VerifiedWebhook``).

    ``body`` is the raw request body exactly as received, never ``json.dumps`` of a parsed body.
    ``secret`` is the webhook secret (``whsec_…``) or several (during a rotation, the new and the
    old one). ``tolerance`` is the largest accepted distance in seconds between
    ``webhook-timestamp`` and this clock (``now``, Unix seconds; default the current time).
    Raises ``WebhookVerificationError`` (with a ``reason``) when the request is not a genuine,
    fresh request of the directory, and ``ValueError`` for a tolerance that is not a finite
    number >= 0 or no secret.
    """
    limit = _tolerance(tolerance)
    secrets = _secrets(secret)
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    found = _Headers(headers)
    delivery_id = found.get("webhook-id")
    timestamp = found.get("webhook-timestamp")
    signatures = found.get("webhook-signature")
    if delivery_id is not None or timestamp is not None or signatures is not None:
        if not delivery_id or not timestamp or not signatures:
            raise WebhookVerificationError(
                "missing_signature", "Missing webhook-id, webhook-timestamp or webhook-signature."
            )
        _verify_standard(secrets, raw, delivery_id, timestamp, signatures, limit, now)
        scheme = "standard"
    else:
        _verify_legacy(secrets, raw, found)
        delivery_id = found.get("x-webhook-delivery") or ""
        scheme = "legacy"
    trace = found.get("x-webhook-trace")
    trace_id = trace if trace is not None and _TRACE_ID.fullmatch(trace) else None
    return VerifiedWebhook(delivery_id, _parse_event(raw), scheme, trace_id)


def _verify_standard(
    secrets: List[str],
    body: bytes,
    delivery_id: str,
    timestamp: str,
    signatures: str,
    tolerance: float,
    now: Optional[float],
) -> None:
    if not _TIMESTAMP.fullmatch(timestamp):
        raise WebhookVerificationError("malformed_timestamp", "webhook-timestamp must be Unix seconds.")
    clock = math.floor(time.time() if now is None else now)
    if abs(clock - int(timestamp)) > tolerance:
        raise WebhookVerificationError(
            "timestamp_out_of_tolerance",
            f"webhook-timestamp is more than {tolerance:g} seconds from this clock.",
        )
    candidates: List[bytes] = []
    for part in signatures.split(" "):
        version, _, value = part.partition(",")
        if version != "v1" or not value:
            continue
        try:
            mac = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if len(mac) == 32:
            candidates.append(mac)
    if candidates:
        message = _utf8(f"{delivery_id}.{timestamp}.") + body
        matched = False
        for secret in secrets:
            expected = hmac.new(standard_key(secret), message, hashlib.sha256).digest()
            for mac in candidates:
                # Every candidate is compared (constant time each); no early exit on a match.
                matched = hmac.compare_digest(expected, mac) or matched
        if matched:
            return
    raise WebhookVerificationError("invalid_signature", "No webhook-signature matches the secret.")


def _verify_legacy(secrets: List[str], body: bytes, headers: _Headers) -> None:
    signature = (headers.get("x-webhook-signature-256") or "").strip()
    if not signature:
        raise WebhookVerificationError("missing_signature", "The request carries no webhook signature.")
    mac = bytes.fromhex(signature[7:]) if _LEGACY.fullmatch(signature) else None
    authorization = headers.get("authorization") or ""
    given = hashlib.sha256(_utf8(authorization)).digest()
    for secret in secrets:
        if mac is None:
            break
        expected = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).digest()
        if not hmac.compare_digest(expected, mac):
            continue
        # The signature proves the body; Authorization must carry the same secret.
        if hmac.compare_digest(given, hashlib.sha256(secret.encode("utf-8")).digest()):
            return
        raise WebhookVerificationError("invalid_authorization", "Authorization does not carry the webhook secret.")
    raise WebhookVerificationError("invalid_signature", "X-Webhook-Signature-256 does not match the secret.")


def _parse_event(body: bytes) -> WebhookEvent:
    try:
        event = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        raise WebhookVerificationError("invalid_body", "The body is not a JSON webhook event.")
    return cast(WebhookEvent, event)
