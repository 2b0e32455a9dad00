"""A bot owner's script on botdir, typed (``mypy --strict`` runs on it): posts the server count,
publishes the commands, checks a voter, reads the vote log, runs the autoposter for one post and
verifies a webhook request the way a receiver does. Prints what it got as one JSON line.

    BOTDIR_BASE_URL=https://botdir.example BOTDIR_TOKEN=... BOTDIR_BOT_ID=... python owner.py
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import datetime, timedelta, timezone
from typing import Dict, List

import botdir
from botdir import (
    ApiError,
    AsyncClient,
    Client,
    Command,
    StatsResponse,
    VerifiedWebhook,
    Vote,
    start_autoposter,
    verify_webhook,
)
from botdir.webhook import standard_signature

COMMANDS: List[Command] = [
    {"name": "ping", "description": "Checks the latency"},
    {"name": "vote", "description": "Links the voting page"},
]


async def autopost_once(base_url: str, token: str, bot_id: str, count: int) -> StatsResponse:
    """The autoposter as a discord.py bot's setup_hook starts it, stopped after its first post."""
    posted: asyncio.Queue[StatsResponse] = asyncio.Queue()
    async with AsyncClient(base_url=base_url, token=token, bot_id=bot_id) as client:
        poster = start_autoposter(client, lambda: count, interval=1800, on_post=posted.put_nowait)
        try:
            return await asyncio.wait_for(posted.get(), timeout=60)
        finally:
            poster.stop()


def signed_request(secret: str) -> VerifiedWebhook:
    """What a receiver does with a request: verify the raw bytes, then trust the event."""
    body = b'{"event":"vote.create","bot_id":"1","user_id":"2","voted_at":"2026-01-01T00:00:00.000Z"}'
    now = int(time.time())
    headers: Dict[str, str] = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(now),
        "webhook-signature": standard_signature(secret, "msg_1", now, body),
    }
    return verify_webhook(body, headers, secret)


def main() -> None:
    base_url = os.environ["BOTDIR_BASE_URL"]
    token = os.environ["BOTDIR_TOKEN"]
    bot_id = os.environ["BOTDIR_BOT_ID"]
    voter = os.environ.get("BOTDIR_VOTER", "123456789012345678")

    client = Client(base_url=base_url, token=token, bot_id=bot_id)
    stats = client.post_stats(1482)
    commands = client.put_commands(COMMANDS)
    voted = client.has_voted(voter)
    latest: List[Vote] = client.votes(limit=10)
    since = datetime.now(timezone.utc) - timedelta(days=1)
    settled = sum(1 for _ in client.votes_since(since))
    autoposted = asyncio.run(autopost_once(base_url, token, bot_id, 1500))
    delivery_id, event, scheme = signed_request("whsec_" + "ab" * 32)

    refused = None
    try:
        Client(base_url=base_url, token="not-a-token", bot_id=bot_id, retry=False).post_stats(1)
    except ApiError as error:
        refused = error.status

    print(
        json.dumps(
            {
                "version": botdir.__version__,
                "module": botdir.__file__,
                "server_count": stats["server_count"],
                "commands": commands["count"],
                "has_voted": voted,
                "votes": len(latest),
                "settled_votes": settled,
                "autoposted": autoposted["server_count"],
                "verified": [delivery_id, event["event"], scheme],
                "refused": refused,
            }
        )
    )


if __name__ == "__main__":
    main()
