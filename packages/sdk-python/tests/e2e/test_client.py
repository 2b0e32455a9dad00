"""Client and AsyncClient against the real API (apps from dist/): every method, its errors and its
retries (a scripted proxy in front of the real API for 503, 429, a dropped connection and a lost
answer; a real over-limit 429 too)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Callable, Dict, List

import pytest

from botdir import ApiError, RetryPolicy

from .clients import Either
from .harness import Recorder, ScriptedProxy, Stack, user_id, wait_for


@pytest.fixture(params=["sync", "async"])
def kind(request: Any) -> str:
    value: str = request.param
    return value


@pytest.fixture
async def make(kind: str) -> AsyncIterator[Callable[..., Either]]:
    made: List[Either] = []

    def build(base_url: str, bot: Dict[str, str], **options: Any) -> Either:
        either = Either(kind, base_url, bot, **options)
        made.append(either)
        return either

    yield build
    for either in made:
        await either.close()


async def error_of(either: Either, method: str, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await either.call(method, *args, **kwargs)
    return caught.value


async def test_stats_for_the_bot_and_per_shard(stack: Stack, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    client = make(stack.api, bot)
    assert await client.call("post_stats", 1482) == {"success": True, "server_count": 1482}
    assert stack.server_count(bot["id"]) == 1482
    await client.call("post_stats", 10, shard_id=0, shard_count=2)
    assert await client.call("post_stats", 5, shard_id=1, shard_count=2) == {"success": True, "server_count": 5}
    assert stack.server_count(bot["id"]) == 15


async def test_commands_are_replaced_and_an_empty_list_clears_them(stack: Stack, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    client = make(stack.api, bot)
    commands = [
        {"name": "ping", "description": "Checks the latency"},
        {"name": "help", "description": "Lists the commands", "options": [{"type": 3, "name": "topic"}]},
        {"name": "ping", "description": "A duplicate"},
    ]
    assert await client.call("put_commands", commands) == {"success": True, "count": 2}
    assert stack.internal("GET", f"/internal/v1/bots/{bot['id']}")[1]["commands"] == commands[:2]
    assert await client.call("put_commands", []) == {"success": True, "count": 0}
    assert stack.internal("GET", f"/internal/v1/bots/{bot['id']}")[1]["commands"] == []


async def test_check_has_voted_and_votes_report_a_vote(stack: Stack, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    client = make(stack.api, bot)
    voter = user_id()
    voted_at = stack.vote(bot["id"], voter)["voted_at"]
    next_at = datetime.strptime(voted_at, "%Y-%m-%dT%H:%M:%S.%fZ") + timedelta(hours=12)
    assert await client.call("check", voter) == {
        "voted": 1,
        "hasVoted": True,
        "votedAt": voted_at,
        "nextVoteAt": next_at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{next_at.microsecond // 1000:03d}Z",
    }
    assert await client.call("has_voted", voter) is True
    # The base other directories' clients are given works too.
    assert await make(f"{stack.api}/api/v1/", bot).call("has_voted", voter) is True
    assert await client.call("has_voted", user_id()) is False
    assert await client.call("check", user_id()) == {"voted": 0, "hasVoted": False, "votedAt": None, "nextVoteAt": None}
    assert await client.call("votes", limit=5) == [{"user_id": voter, "voted_at": voted_at}]


async def test_votes_since_pages_through_250_settled_votes_oldest_first_in_three_requests(
    stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]
) -> None:
    bot = stack.known_bot()
    start_ms = int(time.time() * 1000) - 3_600_000
    log = stack.rpc("seedVotes", botId=bot["id"], count=270, startMs=start_ms, stepMs=1000)
    since = datetime.fromtimestamp((start_ms + 20 * 1000) / 1000, tz=timezone.utc)
    # A vote younger than 10 s is not listed yet (settled votes only).
    stack.vote(bot["id"], user_id())
    seen = await make(proxy.base, bot).votes_since(since)
    assert seen == log[20:]
    assert proxy.to(bot["id"]) == [200, 200, 200]


async def test_another_bots_id_is_a_404_with_the_apis_sentence(stack: Stack, make: Callable[..., Either]) -> None:
    bot, other = stack.known_bot(), stack.known_bot()
    error = await error_of(make(stack.api, {"id": other["id"], "token": bot["token"]}), "check", user_id())
    assert (error.status, error.message, error.retry_after) == (404, "Bot not found.", None)


async def test_400_and_401_are_not_retried(stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    too_long = await error_of(make(proxy.base, bot), "put_commands", [{"name": "x" * 33, "description": "d"}])
    assert (too_long.status, too_long.message) == (400, "commands[0].name must be 1 to 32 characters long.")
    unknown = await error_of(make(proxy.base, {**bot, "token": "not-a-token"}), "post_stats", 1)
    assert (unknown.status, unknown.message) == (401, "Invalid token.")
    assert proxy.to(bot["id"]) == [400, 401]


async def test_a_503_is_backed_off_and_the_next_real_answer_succeeds(
    stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]
) -> None:
    bot = stack.known_bot()
    proxy.script((503, {"error": "The service is unavailable."}, {}))
    assert await make(proxy.base, bot).call("post_stats", 503) == {"success": True, "server_count": 503}
    assert proxy.to(bot["id"]) == [503, 200]
    assert stack.server_count(bot["id"]) == 503


async def test_a_429_with_retry_after_1_is_waited_out(stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    proxy.script((429, {"error": "Rate limit exceeded.", "retryAfter": 1}, {"retry-after": "1"}))
    started = time.monotonic()
    assert (await make(proxy.base, bot).call("post_stats", 429))["server_count"] == 429
    assert time.monotonic() - started >= 0.99
    assert proxy.to(bot["id"]) == [429, 200]


async def test_a_dropped_connection_is_retried(stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    proxy.script("reset")
    assert await make(proxy.base, bot).call("has_voted", user_id()) is False
    assert proxy.to(bot["id"]) == ["reset", 200]


async def test_retry_false_raises_a_503_at_once(stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    proxy.script((503, {"error": "The service is unavailable."}, {}))
    error = await error_of(make(proxy.base, bot, retry=False), "votes")
    assert (error.status, error.message) == (503, "The service is unavailable.")
    assert proxy.to(bot["id"]) == [503]


async def test_a_2xx_that_cannot_be_read_is_an_error(stack: Stack, proxy: ScriptedProxy, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    proxy.script((200, "<html>captive portal</html>", {"content-type": "text/html"}))
    error = await error_of(make(proxy.base, bot), "check", user_id())
    assert error.status == 200
    assert proxy.to(bot["id"]) == [200]


async def test_the_real_limit_beyond_the_bound_raises_429_with_retry_after(stack: Stack, make: Callable[..., Either]) -> None:
    bot = stack.known_bot()
    client = make(stack.api, bot, retry=RetryPolicy(max_retry_after=0))
    for _ in range(10):  # PUT /commands: 10 a minute
        await client.call("put_commands", [])
    error = await error_of(client, "put_commands", [])
    assert (error.status, error.message) == (429, "Rate limit exceeded.")
    assert error.retry_after is not None and 1 <= error.retry_after <= 60


async def test_webhook_deliveries_lists_a_delivery_and_redeliver_sends_it_again(
    stack: Stack, recorder: Recorder, make: Callable[..., Either]
) -> None:
    bot = stack.webhook_bot(recorder.url(), "whsec_" + "2b" * 32)
    client = make(stack.api, bot)
    stack.vote(bot["id"], user_id())
    delivered = stack.delivered(bot["id"])
    attempts = await client.call("webhook_deliveries")
    assert len(attempts) == 1
    assert {k: attempts[0].get(k) for k in ("deliveryId", "attempt", "series", "statusCode", "outcome", "event")} == {
        "deliveryId": delivered["id"],
        "attempt": 1,
        "series": 0,
        "statusCode": 204,
        "outcome": "delivered",
        "event": "vote.create",
    }
    assert await client.call("redeliver", delivered["id"]) == {"deliveryId": delivered["id"], "state": "pending", "series": 1}
    wait_for(lambda: len(recorder.requests) == 2, "the redelivery")
    assert [r["headers"]["x-webhook-delivery"] for r in recorder.requests] == [delivered["id"]] * 2


async def test_a_redeliver_whose_answer_was_lost_reports_it_started_with_no_series(
    stack: Stack, proxy: ScriptedProxy, recorder: Recorder, make: Callable[..., Either]
) -> None:
    bot = stack.webhook_bot(recorder.url(), "whsec_" + "3c" * 32)
    stack.vote(bot["id"], user_id())
    delivered = stack.delivered(bot["id"])
    # The redelivery's attempt hangs at the receiver, so the delivery stays pending: the client's
    # retry is told 409, although its first try (forwarded, its answer replaced by a 503) started it.
    recorder.hold.set()
    proxy.script("forward-503")
    answer = await make(proxy.base, bot).call("redeliver", delivered["id"])
    assert answer == {"deliveryId": delivered["id"], "state": "pending", "series": None}
    # The two tries, and no read of the delivery log.
    assert proxy.to(bot["id"]) == ["202→503", 409]
    recorder.hold.clear()


async def test_recover_sends_the_votes_recorded_without_a_delivery_and_recovery_counts_them(
    stack: Stack, recorder: Recorder, make: Callable[..., Either]
) -> None:
    bot = stack.webhook_bot(recorder.url("/recover"), "whsec_" + "3c" * 32)
    client = make(stack.api, bot)
    # Two votes recorded with no delivery (as while the webhook was disabled).
    start = datetime.now(timezone.utc) - timedelta(hours=2)
    stack.rpc("seedVotes", botId=bot["id"], startMs=start.timestamp() * 1000, stepMs=60_000, count=2)

    started = await client.call("recover", start - timedelta(minutes=1))
    assert started == {"recoveryId": started["recoveryId"], "queued": 2}
    wait_for(lambda: len(recorder.requests) == 2, "the recovered votes")

    def done() -> Any:
        answer = stack_recovery(stack, bot, started["recoveryId"])
        return answer if answer["state"] == "done" else None

    wait_for(done, "the recovery to end")
    counts = await client.call("recovery", started["recoveryId"])
    assert {k: counts[k] for k in ("state", "queued", "delivered", "failed", "pending")} == {
        "state": "done",
        "queued": 2,
        "delivered": 2,
        "failed": 0,
        "pending": 0,
    }
    attempts = await client.call("webhook_deliveries")
    assert [a["recovered"] for a in attempts] == [True, True]


async def test_recover_refuses_a_window_older_than_14_days_with_one_sentence(
    stack: Stack, make: Callable[..., Either]
) -> None:
    bot = stack.webhook_bot("http://127.0.0.1:9/hook", "whsec_" + "4d" * 32)
    error = await error_of(make(stack.api, bot), "recover", datetime.now(timezone.utc) - timedelta(days=15))
    assert (error.status, error.message) == (
        400,
        "since must be an ISO 8601 date-time with a time zone within the last 14 days.",
    )


def stack_recovery(stack: Stack, bot: Dict[str, str], recovery_id: str) -> Dict[str, Any]:
    status, body = stack.internal("GET", f"/internal/v1/bots/{bot['id']}/webhook/recoveries/{recovery_id}")
    assert status == 200, (status, body)
    found: Dict[str, Any] = body
    return found
