"""The end-to-end suite's fixtures: one stack for the session, a scripted proxy in front of its API."""

from __future__ import annotations

from typing import Iterator

import pytest

from .harness import Recorder, ScriptedProxy, Stack


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    started = Stack()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def proxy(stack: Stack) -> Iterator[ScriptedProxy]:
    started = ScriptedProxy(stack.api)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    started = Recorder()
    try:
        yield started
    finally:
        started.close()
