"""What the clients share: addresses, request bodies, reading answers, the lost-answer rule of
redeliver; and that the synchronous half imports without aiohttp."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Tuple, Union

import pytest

from botdir import ApiError, Client, RetryPolicy
from botdir._core import read_answer, since_text

from ..conftest import PACKAGE_ROOT


#: One scripted answer: ``(status, body)``, ``(status, body, headers)``, or ``"drop"``.
Step = Union[Tuple[int, Dict[str, Any]], Tuple[int, Dict[str, Any], Dict[str, str]], str]


class ScriptedApi:
    """A local HTTP server answering from a script, in order: ``(status, body)``, or ``"drop"`` to
    close the connection without an answer; after the script, 200 with an empty delivery log. It
    records every request's method and path."""

    def __init__(self) -> None:
        self.requests: List[Tuple[str, str]] = []
        self._script: List[Step] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                api.requests.append((self.command, self.path))
                step = api._script.pop(0) if api._script else (200, {"attempts": []})
                if isinstance(step, str):  # "drop"
                    return
                status, body = step[0], step[1]
                raw = json.dumps(body).encode("utf-8")
                self.send_response(status)
                for name, value in (step[2] if len(step) > 2 else {}).items():  # type: ignore[misc]
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def script(self, *steps: Step) -> None:
        self._script.extend(steps)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


#: Retries without waiting: the script decides what each try gets.
NO_WAIT = RetryPolicy(base_delay=0)
PENDING: Step = (409, {"error": "The delivery is pending."}, {"X-Botdir-Conflict": "delivery_pending"})
NO_WEBHOOK: Step = (
    409,
    {"error": "The bot has no webhook URL; set one before redelivering."},
    {"X-Botdir-Conflict": "no_webhook"},
)
#: A 409 without the header (an older server, a proxy): its cause is not known.
UNTOLD: Step = (409, {"error": "The delivery is pending."})
LOST_ANSWERS: List[Step] = [(503, {"error": "The service is unavailable."}), "drop"]
REDELIVER = ("POST", "/api/v1/bots/1/webhook/deliveries/d/redeliver")


@pytest.fixture
def api() -> Iterator[ScriptedApi]:
    server = ScriptedApi()
    yield server
    server.close()


@pytest.mark.parametrize("lost", LOST_ANSWERS)
def test_when_redeliver_loses_its_first_answer_and_the_retry_is_told_409_then_it_started_with_no_series(
    api: ScriptedApi, lost: Step
) -> None:
    api.script(lost, PENDING)
    client = Client(base_url=api.base, token="t", bot_id="1", retry=NO_WAIT)
    assert client.redeliver("d") == {"deliveryId": "d", "state": "pending", "series": None}
    # The two tries of the redelivery, and no read of the delivery log.
    assert api.requests == [REDELIVER, REDELIVER]


@pytest.mark.parametrize("lost", LOST_ANSWERS)
async def test_when_async_redeliver_loses_its_first_answer_and_the_retry_is_told_409_then_it_started_with_no_series(
    api: ScriptedApi, lost: Step
) -> None:
    from botdir import AsyncClient

    api.script(lost, PENDING)
    async with AsyncClient(base_url=api.base, token="t", bot_id="1", retry=NO_WAIT) as client:
        assert await client.redeliver("d") == {"deliveryId": "d", "state": "pending", "series": None}
    assert api.requests == [REDELIVER, REDELIVER]


@pytest.mark.parametrize("lost", LOST_ANSWERS)
@pytest.mark.parametrize("conflict", [NO_WEBHOOK, UNTOLD], ids=["no_webhook", "no-header"])
def test_when_redeliver_loses_its_first_answer_and_the_retry_is_told_another_409_then_it_raises(
    api: ScriptedApi, lost: Step, conflict: Step
) -> None:
    api.script(lost, conflict)
    client = Client(base_url=api.base, token="t", bot_id="1", retry=NO_WAIT)
    with pytest.raises(ApiError) as caught:
        client.redeliver("d")
    assert caught.value.status == 409
    assert caught.value.conflict == (conflict[2]["X-Botdir-Conflict"] if len(conflict) > 2 else None)  # type: ignore[misc]


@pytest.mark.parametrize("conflict", [NO_WEBHOOK, UNTOLD], ids=["no_webhook", "no-header"])
async def test_when_async_redeliver_loses_its_first_answer_and_the_retry_is_told_another_409_then_it_raises(
    api: ScriptedApi, conflict: Step
) -> None:
    from botdir import AsyncClient

    api.script("drop", conflict)
    async with AsyncClient(base_url=api.base, token="t", bot_id="1", retry=NO_WAIT) as client:
        with pytest.raises(ApiError) as caught:
            await client.redeliver("d")
    assert caught.value.status == 409


def test_when_the_first_try_of_redeliver_is_told_409_then_it_raises(api: ScriptedApi) -> None:
    api.script(PENDING)
    client = Client(base_url=api.base, token="t", bot_id="1", retry=NO_WAIT)
    with pytest.raises(ApiError) as caught:
        client.redeliver("d")
    assert caught.value.status == 409
    assert api.requests == [REDELIVER]


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
