"""Turns of one conversation that arrive at once: each match sees the serves of the ones
before it (the frequency cap holds), while matches of different threads, and of one post,
still run side by side (edge.matching.ThreadTurns)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass

import pytest

from edge.matching import ThreadTurns
from tests.conftest import issue_key
from tests.delivery.helpers import at_once
from tests.routes.conftest import Script

AI = "/v1/ai/process"
UGC = "/v1/ugc/process"
PROMPT = "what should I feed a picky puppy?"
ANSWER = "Try a grain-free kibble and feed at regular times."


def turn(key: str, conversation_id: str, message_id: str) -> tuple[str, str, dict]:
    body = {"message_id": message_id, "conversation_id": conversation_id,
            "prompt": PROMPT, "content": ANSWER}  # fmt: skip
    return ("POST", AI, {"json": body, "headers": {"X-API-Key": key}})


def post(key: str, post_id: str, n: int) -> tuple[str, str, dict]:
    body = {"post_id": post_id, "message": f"my pup will not touch his kibble ({n})"}
    return ("POST", UGC, {"json": body, "headers": {"X-API-Key": key}})


@pytest.mark.parametrize("turns", [4, 8])
def test_turns_of_one_conversation_at_once_keep_the_frequency_cap(make_client, turns):
    client = make_client()
    key = issue_key(client, "ai")
    answers = at_once(client, [turn(key, "c-burst", f"m{i}") for i in range(turns)])
    assert [r.status_code for r in answers] == [200] * turns
    served = Counter(ad["ad_id"] for r in answers for ad in r.json()["ads"])
    assert served, [r.json() for r in answers]
    assert max(served.values()) == 3, served  # the top ad on three turns, never a fourth
    later = at_once(client, [turn(key, "c-burst", "m-late")])[0].json()
    capped = {ad for ad, n in served.items() if n == 3}
    assert not capped & {ad["ad_id"] for ad in later["ads"]}, later


@dataclass
class Overlap(Script):
    """A scripted matcher that counts how many of its matches ran at the same moment."""

    running: int = 0
    most: int = 0

    async def match(self, request, state, now, spend=None, *, deadline=None, lane="partner"):
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            return await super().match(request, state, now, spend, deadline=deadline, lane=lane)
        finally:
            self.running -= 1


@pytest.fixture
def overlap(test_catalogue) -> Overlap:
    return Overlap(test_catalogue, delay=0.05)


def test_turns_of_one_conversation_are_matched_one_after_another(make_client, overlap):
    client = make_client(matcher=overlap)
    key = issue_key(client, "ai")
    answers = at_once(client, [turn(key, "c-1", f"m{i}") for i in range(4)])
    assert [r.status_code for r in answers] == [200] * 4
    assert overlap.most == 1 and len(overlap.requests) == 4
    assert len(client.app.state.ctx.thread_turns) == 0  # nothing kept once idle


def test_different_conversations_are_matched_side_by_side(make_client, overlap):
    client = make_client(matcher=overlap)
    key = issue_key(client, "ai")
    answers = at_once(client, [turn(key, f"c-{i}", "m-1") for i in range(4)])
    assert [r.status_code for r in answers] == [200] * 4
    assert overlap.most == 4


def test_requests_of_one_post_are_matched_side_by_side(make_client, overlap):
    # A post is a thread of one unit: its serves never cap another request of it, and a
    # popular post's views must not queue behind each other (docs/decisions.md).
    client = make_client(matcher=overlap)
    key = issue_key(client, "ugc")
    answers = at_once(client, [post(key, "p-1", i) for i in range(4)])
    assert [r.status_code for r in answers] == [200] * 4
    assert overlap.most == 4


def test_thread_turns_hold_one_key_at_a_time_and_forget_idle_keys():
    async def scenario() -> None:
        turns = ThreadTurns()
        order: list[str] = []

        async def hold(key: str | None, name: str, seconds: float) -> None:
            async with turns.hold(key):
                order.append(f"{name}+")
                await asyncio.sleep(seconds)
                order.append(f"{name}-")

        first = asyncio.create_task(hold("t", "a", 0.02))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(hold("t", "b", 0.0))
        cancelled = asyncio.create_task(hold("t", "c", 0.0))
        other = asyncio.create_task(hold("u", "d", 0.0))
        free = asyncio.create_task(hold(None, "e", 0.0))
        await asyncio.sleep(0.005)
        cancelled.cancel()  # a caller that gives up while waiting blocks nobody
        await asyncio.gather(first, waiting, other, free, return_exceptions=True)
        assert order.index("d-") < order.index("a-")  # another thread never waits
        assert order.index("e-") < order.index("a-")  # nor a match that records nothing
        assert order.index("a-") < order.index("b+")  # the same thread waits its turn
        assert "c+" not in order and cancelled.cancelled()
        assert len(turns) == 0

    asyncio.run(scenario())
