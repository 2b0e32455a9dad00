"""The README's client and verification snippets run against the real stack (apps from dist/), as
written except for the placeholders an owner fills in: the directory's address
(``https://botdir.example``), the bot id (``123456789012345678``) and the token and webhook secret
they read from the environment. The receiver and discord.py snippets are checked statically
(tests/unit/test_readme.py): they serve forever or need packages this suite does not install."""

from __future__ import annotations

import ast
import asyncio
import os
import time
from typing import Any, Dict, Iterator

import pytest

from botdir.webhook import standard_signature

from ..unit.test_readme import snippets
from .harness import Stack

SECRET = "whsec_" + "3c" * 16


def snippet_with(needle: str) -> str:
    found = [source for _, source in snippets() if needle in source]
    assert len(found) >= 1, needle
    return found[0]


@pytest.fixture
def owner_env(stack: Stack) -> Iterator[Dict[str, str]]:
    bot = stack.known_bot()
    saved = {name: os.environ.get(name) for name in ("BOTDIR_TOKEN", "WEBHOOK_SECRET")}
    os.environ["BOTDIR_TOKEN"] = bot["token"]
    os.environ["WEBHOOK_SECRET"] = SECRET
    try:
        yield bot
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run(source: str, stack: Stack, bot: Dict[str, str]) -> Dict[str, Any]:
    filled = source.replace("https://botdir.example", stack.api).replace("123456789012345678", bot["id"])
    code = compile(filled, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: Dict[str, Any] = {"__name__": "readme"}
    result = eval(code, namespace)  # a coroutine when the snippet awaits at top level
    if asyncio.iscoroutine(result):
        asyncio.run(result)
    return namespace


def test_the_client_snippet_runs_against_the_api(stack: Stack, owner_env: Dict[str, str]) -> None:
    run(snippet_with("client.votes_since("), stack, owner_env)
    assert stack.server_count(owner_env["id"]) == 1482


def test_the_async_client_snippet_runs_against_the_api(stack: Stack, owner_env: Dict[str, str]) -> None:
    run(snippet_with("async with AsyncClient("), stack, owner_env)


def test_the_error_snippet_runs_against_the_api(stack: Stack, owner_env: Dict[str, str]) -> None:
    run(snippet_with("client.put_commands(commands)\nexcept ApiError as error:"), stack, owner_env)


def test_the_recovery_snippet_runs_against_the_api(
    stack: Stack, owner_env: Dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    bot = stack.webhook_bot("http://127.0.0.1:9/votes", SECRET)
    os.environ["BOTDIR_TOKEN"] = bot["token"]
    run(snippet_with("client.recover("), stack, bot)
    assert capsys.readouterr().out.splitlines() == ["0 votes queued again", "done 0 0"]


def test_the_verification_snippet_verifies_a_signed_vote_and_refuses_a_forged_one(
    stack: Stack, owner_env: Dict[str, str]
) -> None:
    namespace = run(snippet_with("verify_webhook("), stack, owner_env)
    body = b'{"event":"vote.create","bot_id":"1","user_id":"2","voted_at":"2026-11-27T10:00:00.000Z"}'
    at = int(time.time())
    headers = {"webhook-id": "d-1", "webhook-timestamp": str(at), "webhook-signature": standard_signature(SECRET, "d-1", at, body)}
    assert namespace["handle"](body, headers) == (204, "")
    assert namespace["handle"](body + b" ", headers) == (401, "invalid_signature")
