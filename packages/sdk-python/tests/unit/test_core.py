"""What the clients share: addresses, request bodies, reading answers, the lost-answer rule of
redeliver; and that the synchronous half imports without aiohttp."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from typing import Any, Dict

import pytest

from botdir import ApiError, Client
from botdir._core import read_answer, since_text, started_after_lost_answer

from ..conftest import PACKAGE_ROOT


def attempt(series: int, number: int, outcome: str, state: str, delivery_id: str = "d") -> Dict[str, Any]:
    return {
        "deliveryId": delivery_id,
        "attempt": number,
        "series": series,
        "statusCode": 204 if outcome == "delivered" else 500,
        "errorKind": None,
        "outcome": outcome,
        "deliveryState": state,
        "attemptedAt": "2026-11-27T10:00:00.000Z",
        "test": False,
    }


def test_the_series_a_lost_redelivery_started_is_read_from_the_log() -> None:
    # The new series has made no attempt yet: the newest listed series (0) had ended.
    assert started_after_lost_answer("d", [attempt(0, 1, "delivered", "pending")])["series"] == 1  # type: ignore[list-item]
    # The new series (1) is retrying.
    log = [attempt(1, 1, "failed", "pending"), attempt(0, 1, "delivered", "pending")]
    assert started_after_lost_answer("d", log)["series"] == 1  # type: ignore[arg-type]
    # It has ended already.
    log = [attempt(2, 1, "delivered", "delivered"), attempt(1, 1, "delivered", "delivered")]
    assert started_after_lost_answer("d", log) == {"deliveryId": "d", "state": "pending", "series": 2}  # type: ignore[arg-type]
    assert started_after_lost_answer("d", [attempt(0, 1, "delivered", "pending", "other")])["series"] == 1  # type: ignore[list-item]


def test_answers_are_read_as_the_spec_says() -> None:
    assert read_answer(200, None, b'{"success":true,"count":2}') == {"success": True, "count": 2}
    for raw in (b"", b"<html>", b"[1]"):
        with pytest.raises(ApiError) as caught:
            read_answer(200, None, raw)
        assert caught.value.status == 200
    with pytest.raises(ApiError) as caught:
        read_answer(429, "7", b'{"error":"Rate limit exceeded.","retryAfter":3}')
    assert (caught.value.status, caught.value.message, caught.value.retry_after) == (429, "Rate limit exceeded.", 3)
    with pytest.raises(ApiError) as caught:
        read_answer(429, "7", b"<html>slow down</html>")
    assert (caught.value.message, caught.value.retry_after) == ("HTTP 429", 7)
    with pytest.raises(ApiError) as caught:
        read_answer(502, None, b"Bad Gateway")
    assert (caught.value.status, caught.value.message, caught.value.retry_after) == (502, "HTTP 502", None)


def test_since_is_iso_utc_with_milliseconds_and_must_have_a_zone() -> None:
    at = datetime(2026, 11, 27, 12, 30, 5, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert since_text(at) == "2026-11-27T10:30:05.123Z"
    assert since_text("2026-11-27T10:00:00Z") == "2026-11-27T10:00:00Z"
    with pytest.raises(ValueError):
        since_text(datetime(2026, 11, 27))


def test_options_are_checked_and_the_token_never_shows() -> None:
    for bad in ({"base_url": ""}, {"token": ""}, {"bot_id": ""}, {"timeout": 0}, {"timeout": float("inf")}):
        options: Dict[str, Any] = {"base_url": "http://x", "token": "secret-token", "bot_id": "1", **bad}
        with pytest.raises(ValueError):
            Client(**options)
    client = Client(base_url="http://x", token="secret-token", bot_id="1")
    assert "secret-token" not in repr(client)
    with pytest.raises(TypeError):
        client.post_stats("1482")  # type: ignore[arg-type]


def test_the_package_imports_without_aiohttp_and_async_client_says_what_is_missing() -> None:
    code = (
        "import sys; sys.modules['aiohttp'] = None\n"
        "import botdir\n"
        "botdir.Client(base_url='http://x', token='t', bot_id='1'); botdir.verify_webhook; botdir.asgi_webhook\n"
        "try:\n    botdir.AsyncClient\nexcept ImportError as e:\n    print('ImportError', e.name)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], cwd=PACKAGE_ROOT / "src", capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "ImportError aiohttp"
