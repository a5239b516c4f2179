"""POST /v1/ai/process: match an ad to an assistant turn. Production only: the
AI product has no sandbox, so the sandbox answers 404 here."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from edge import matching
from edge.context import Context
from edge.counters import count_outcome
from edge.errors import BadGateway, Unprocessable
from edge.http import no_query, read_body
from edge.partner import schemas
from edge.partner.bodies import AiBody, parse_ai
from edge.partner.guard import Admission, match_once
from edge.partner.render import ai_body
from edge.store import StoreUnavailable
from edge.threads import partner_scope, partner_thread
from matcher.state import Backoff
from matcher.types import MatchRequest, MatchResult

PATH = "/v1/ai/process"
# A conversation in which the user wrote of harming themselves gets no ad for this long
# after that turn, whatever its later turns say ("ok. what's a good mattress?").
CRISIS_HOLD_SECONDS = 24 * 3600
CRISIS_CATEGORY = "self_harm"

# An answer that refers the user to crisis help: the assistant read the prompt as self-harm.
# (The lexicon already reads "suicide hotline", "suicidal" and the like in every answer.)
_CONTACT = r"\b(?:call|text|dial|ring|contact|reach out to|talk to|speak (?:to|with)|go to)\b"
_CRISIS_HELP = re.compile(
    # A crisis number after a word of contact (988 alone is also an order, a room, a year).
    _CONTACT + r"[^.\n]{0,40}?(?:\b988\b|\b9-8-8\b|\b9 8 8\b|\bnine eight eight\b|"
    r"\b911\b|\b999\b|\b112\b|\b3114\b|\b024\b|"
    # Or a crisis service, a therapist, emergency services.
    r"\bcrisis[- \n](?:lines?|lifeline|text line|hotline|helpline|cent(?:er|re)|services?|"
    r"team|counsel(?:l)?or)\b|\bhelplines?\b|\bsamaritans\b|\bbefrienders\b|"
    r"\b(?:therapist|counsel(?:l)?or|mental health professional)\b|"
    r"\b(?:emergency services|(?:your )?local emergency number|(?:the )?(?:nearest )?"
    r"(?:emergency room|er|a&e))\b)|"
    # Numbers and services that are crisis help wherever they appear.
    r"\b741741\b|\b85258\b|\b116 ?123\b|\b13 ?11 ?14\b|273-8255|488-7386|668-6868|"
    r"\b(?:suicide (?:&|and) crisis lifeline|988 ?lifeline|crisis text line|trevor project|"
    r"kids help phone|findahelpline|crisis counsel(?:l)?ors?|l[íi]nea 024)\b|"
    # The words of an answer to someone in crisis.
    r"\b(?:thinking (?:of|about)|thoughts of|want(?:ing)? to|considering) (?:ending|taking) "
    r"your (?:own )?life\b|\bthoughts of (?:suicide|self-harm|harming yourself)\b|"
    r"\byou(?:'re| are) not alone\b|\bsorry (?:that )?you(?:'re| are) (?:feeling|going through)",
    re.IGNORECASE,
)


def crisis_key(thread: str) -> str:
    """Where a conversation's hold is kept: a no-match window of its own (the matcher
    state's backoff rows, pruned once it ends), beside no post's."""
    return f"{thread}#crisis"


def routes(ctx: Context) -> list[BaseRoute]:
    if not ctx.settings.is_production:
        return []
    return [Route(PATH, partial(process, ctx), methods=["POST"])]


async def process(ctx: Context, request: Request) -> Response:
    async def parse() -> AiBody:
        no_query(request.scope, Unprocessable)  # every refusal of this route is a 422
        return parse_ai(await read_body(request, max_bytes=ctx.settings.max_body_bytes))

    return await match_once(ctx, request, "ai", parse, partial(turn, ctx, request))


async def turn(
    ctx: Context, request: Request, admission: Admission, body: AiBody
) -> dict[str, Any]:
    """One AI turn matched (or held, after a self-harm turn of its conversation)."""
    # Disables and frequency are per conversation; a lone turn is its own thread. Scoped to
    # this partner's key family (edge.threads).
    thread = partner_thread("ai", admission.key, body.conversation_id or body.message_id)
    held = body.conversation_id is not None and await in_crisis(ctx, thread)
    if held:
        result = MatchResult(outcome="no_match", reason="unsafe", unsafe_category=CRISIS_CATEGORY)
    else:
        result = await matching.match(
            ctx,
            MatchRequest(
                product="ai",
                content=body.content,
                prompt=body.prompt,
                thread_id=thread,
                turn_id=body.message_id,  # the frequency cap counts an ad once per turn
                geo=body.geo,
                max_ads=ctx.settings.max_ads,
            ),
        )
        if body.conversation_id is not None and holds(result, body.content):
            await hold(ctx, thread)
    count_outcome(ctx.counters, admission.key.family, result)
    assert ctx.signer is not None  # set at start-up, before any request
    # The beacon URLs name the partner too: its conversation "7" is not another's (scope),
    # and its key's report row is the one their views, clicks and conversions count for.
    scope = partner_scope(ctx.signer, "ai", admission.key)
    family = admission.key.family
    return ai_body(ctx, result, body.message_id, body.conversation_id, scope, family)


def holds(result: MatchResult, answer: str) -> bool:
    """Whether a turn's verdict holds its conversation: self-harm, on any evidence but the
    nearest-neighbour margin alone on a text of a few words, unless the assistant's answer
    refers the user to crisis help. Such a margin lands near its threshold on small talk
    ("hi", "tell me a joke") as on short self-harm wordings ("i'm done"); that turn gets no
    ad either way, and the answer tells the two apart: "Glad I could help!" or "please call
    988"."""
    if result.unsafe_category != CRISIS_CATEGORY:
        return False
    return result.unsafe_evidence != "margin_short" or _CRISIS_HELP.search(answer) is not None


async def in_crisis(ctx: Context, thread: str) -> bool:
    """Whether a turn of this conversation was judged self-harm within the hold."""
    state = matching.StoreMatchState(ctx.store, ctx.state_writes)
    now = ctx.clock()
    try:
        window = (await state.load(None, crisis_key(thread), None, now)).backoff
    except StoreUnavailable:  # as a match that cannot read its thread: retry, never an ad
        raise BadGateway(
            "the conversation's state could not be read; retry shortly",
            headers={"Retry-After": str(matching.RETRY_AFTER_SECONDS)},
        ) from None
    return window is not None and now < window.until


async def hold(ctx: Context, thread: str) -> None:
    """No ad in this conversation for ``CRISIS_HOLD_SECONDS`` from now, committed before the
    turn is answered (unlike the matcher's own windows, written in the background): the
    partner may send the next turn to another node the moment it has this answer, and a
    node that dies after answering must not take the hold with it. A hold that cannot be
    stored is a 502, so the partner retries the turn and the hold is written then."""
    now = ctx.clock()
    window = Backoff(misses=1, until=now + CRISIS_HOLD_SECONDS, demand="", reason="unsafe")
    try:
        await ctx.store.put_backoff(crisis_key(thread), window, now)
    except StoreUnavailable:
        raise BadGateway(
            "the conversation's hold could not be stored; retry shortly",
            headers={"Retry-After": str(matching.RETRY_AFTER_SECONDS)},
        ) from None


def openapi(ctx: Context) -> dict[str, Any]:
    if not ctx.settings.is_production:
        return {}
    return schemas.ai_process_doc(ctx, PATH)
