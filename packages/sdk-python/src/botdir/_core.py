"""What the synchronous and the asyncio client share: addresses, bodies, reading answers."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode

from .errors import ApiError
from .retry import RetryPolicy, retry_policy
from .models import Command, RedeliverResponse, StatsBody

Query = Mapping[str, Union[str, int, None]]

#: Votes younger than this are not yet listed by ``since``/``cursor`` pages (settled votes only).
SETTLE_SECONDS = 10


class Request:
    """One API call, ready to send: method, full URL, headers and body bytes."""

    __slots__ = ("method", "url", "headers", "body")

    def __init__(self, method: str, url: str, headers: Dict[str, str], body: Optional[bytes]) -> None:
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body


class ClientBase:
    """Options shared by ``Client`` and ``AsyncClient``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        bot_id: str,
        retry: Union[RetryPolicy, bool, None] = None,
        timeout: float = 15.0,
    ) -> None:
        if not base_url:
            raise ValueError("base_url is required")
        if not token:
            raise ValueError("token is required")
        if not bot_id:
            raise ValueError("bot_id is required")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
            raise ValueError("timeout must be a finite number of seconds > 0")
        self.bot_id = str(bot_id)
        # Other directories' clients are configured with the `/api/v1` base; both spellings work here.
        base = base_url.rstrip("/")
        if base.endswith("/api/v1"):
            base = base[: -len("/api/v1")]
        self._root = f"{base}/api/v1/bots/{quote(self.bot_id, safe='')}"
        self._token = token
        self._policy = retry_policy(retry)
        self._timeout = float(timeout)

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}(bot_id={self.bot_id!r})"

    def _build(self, method: str, path: str, query: Optional[Query] = None, body: object = None) -> Request:
        url = self._root + path
        if query:
            items = [(k, str(v)) for k, v in query.items() if v is not None]
            if items:
                url += "?" + urlencode(items)
        headers = {"authorization": self._token, "accept": "application/json", "user-agent": "botdir-python/1.0.0"}
        data: Optional[bytes] = None
        if body is not None:
            headers["content-type"] = "application/json"
            data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        return Request(method, url, headers, data)


def stats_body(server_count: int, shard_id: Optional[int], shard_count: Optional[int]) -> StatsBody:
    for name, value in (("server_count", server_count), ("shard_id", shard_id), ("shard_count", shard_count)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} must be an int")
    body: StatsBody = {"server_count": server_count}
    if shard_id is not None:
        body["shard_id"] = shard_id
    if shard_count is not None:
        body["shard_count"] = shard_count
    return body


def commands_body(commands: Sequence[Command]) -> Dict[str, List[Command]]:
    if isinstance(commands, (str, bytes)) or not isinstance(commands, Sequence):
        raise TypeError("commands must be a list of command dicts")
    return {"commands": list(commands)}


def since_text(since: Union[datetime, str]) -> str:
    if isinstance(since, str):
        return since
    if since.tzinfo is None:
        raise ValueError("since must be timezone-aware (e.g. datetime.now(timezone.utc))")
    utc = since.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def recover_body(since: Union[datetime, str], until: Union[datetime, str, None]) -> Dict[str, str]:
    body = {"since": since_text(since)}
    if until is not None:
        body["until"] = since_text(until)
    return body


def recovery_path(recovery_id: str) -> str:
    return f"/webhook/recoveries/{quote(str(recovery_id), safe='')}"


def redeliver_path(delivery_id: str) -> str:
    return f"/webhook/deliveries/{quote(str(delivery_id), safe='')}/redeliver"


def _parse(raw: bytes) -> Tuple[bool, Any]:
    if not raw:
        return False, None
    try:
        return True, json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False, None


#: The cause a 409 names when a redelivery already started the series.
DELIVERY_PENDING = "delivery_pending"


def read_answer(status: int, retry_after_header: Optional[str], raw: bytes, conflict: Optional[str] = None) -> Any:
    """The parsed body of a 2xx answer, or raises its ``ApiError``.

    A 2xx whose body is not a JSON object is an error too (a proxy's page, a cut answer).
    """
    ok, parsed = _parse(raw)
    if 200 <= status < 300:
        if not ok or not isinstance(parsed, dict):
            raise ApiError(status, "The API's answer could not be read as JSON.", body=None)
        return parsed
    fields: Mapping[str, Any] = parsed if isinstance(parsed, dict) else {}
    message = fields.get("error")
    if not isinstance(message, str):
        message = f"HTTP {status}"
    retry_after: Optional[float] = None
    if status == 429:
        from_body = fields.get("retryAfter")
        if isinstance(from_body, (int, float)) and not isinstance(from_body, bool) and math.isfinite(from_body):
            retry_after = float(from_body)
        elif retry_after_header is not None and retry_after_header.strip():
            try:
                value = float(retry_after_header)
            except ValueError:
                value = math.nan
            if math.isfinite(value) and value >= 0:
                retry_after = value
    cause = conflict if status == 409 and conflict else None
    raise ApiError(status, message, retry_after=retry_after, body=parsed if ok else None, conflict=cause)


def started_after_lost_answer(delivery_id: str) -> RedeliverResponse:
    """The answer of a redelivery whose first try lost its answer and whose retry got 409 pending.

    The first try started the series; its number is not known (``series`` is None).
    """
    return {"deliveryId": delivery_id, "state": "pending", "series": None}
