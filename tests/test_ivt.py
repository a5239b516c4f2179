"""The invalid-traffic classifier: bots from the maintained list, client binding, removed
publishers, per-client impression and click rates."""

from __future__ import annotations

import dataclasses

import crawleruseragents
import pytest

from edge.ivt import (
    BotDetector,
    Client,
    TrafficClassifier,
    client_binding,
    client_key,
    lower_pattern,
)
from edge.settings import RateLimit, Settings
from edge.signing import Signer
from tests.conftest import FakeClock

SIGNER = Signer(b"s" * 32)
CHROME = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/126.0.0.0 Safari/537.36"
)
USER = Client("203.0.113.7", CHROME)


def classifier(clock=None, **overrides) -> TrafficClassifier:
    settings = dataclasses.replace(Settings(), **overrides)
    return TrafficClassifier(settings, clock or FakeClock())


def verdict(c: TrafficClassifier, client: Client = USER, **kw):
    return c.classify_impression(client, key=client_key(SIGNER, client), **kw).reason


@pytest.mark.parametrize(
    "ua",
    [
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "python-requests/2.32.3",
        "curl/8.5.0",
        "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0)",
        "",
        "   ",
    ],
)
def test_bot_and_missing_user_agents_are_invalid(ua):
    assert verdict(classifier(), Client("203.0.113.7", ua)) == "bot_user_agent"


@pytest.mark.parametrize(
    "ua", ["CURL/8.5.0", "Python-Requests/2.31.0", "googlebot/2.1", "headlesschrome", "BINGBOT/2.0"]
)
def test_a_bot_in_other_letter_case_is_still_a_bot(ua):
    assert verdict(classifier(), Client("203.0.113.7", ua)) == "bot_user_agent"


def test_every_listed_crawler_instance_is_a_bot_in_any_case():
    # The list's own example user agents, as sent and upper-cased; and a pattern's escapes
    # keep their meaning when its letters are lower-cased.
    detector = BotDetector()
    instances = [
        ua for entry in crawleruseragents.CRAWLER_USER_AGENTS_DATA for ua in entry["instances"]
    ]
    assert len(instances) > 1000
    missed = [ua for ua in instances if not (detector.is_bot(ua) and detector.is_bot(ua.upper()))]
    assert missed == []
    assert lower_pattern(r"Spider[\s\S]*spider\.com") == r"spider[\s\S]*spider\.com"
    assert BotDetector([r"Current[\s\S]*RSS Reader"]).is_bot("CURRENT/2 (rss reader)")


@pytest.mark.parametrize(
    "ua",
    [
        "node", "undici", "Deno/1.40.0", "Bun/1.0.25", "Java-http-client/17.0.9", "Java/17.0.9",
        "Ruby", "Faraday v2.9.0", "GuzzleHttp/7", "RestSharp/110.2.0.0", "ureq/2.9.1",
        "node-superagent/3.8.3", "Apache-HttpAsyncClient/4.1.4 (Java/1.8.0)",
        "Vert.x-WebClient/4.5.1", "lua-resty-http/0.17.1 (Lua) ngx_lua/10025", "PHP/8.3",
        "PostmanRuntime/7.36.0", "insomnia/2023.5.8", "reqwest/0.11", "rest-client/2.1.0 "
        "(linux x86_64) ruby/3.2.2p53", "Mozilla/5.0 (Windows NT; Windows NT 10.0; en-US) "
        "WindowsPowerShell/5.1.19041.3570", "Mozilla/5.0 (linux) AppleWebKit/537.36 (KHTML, "
        "like Gecko) jsdom/20.0.0", "Mozilla/5.0", "-", "x", "ok/1",
        "Mozilla/5.0 (Windows NT 10.0; Microsoft Windows 10.0.22631; en-US) PowerShell/7.4.6",
        "ReactorNetty/1.1.22", "fasthttp", "Mojolicious (Perl)", "Apache-CXF/3.5.5",
        "Mozilla/4.0 (compatible; Win32; WinHttp.WinHttpRequest.5)", "needle/3.2.0 (Node.js "
        "v20.10.0; linux x64)", "excon/0.110.0", "Laminas_Http_Client", "ktor-client",
        "Google-HTTP-Java-Client/1.43.3 (gzip)", "Mozilla/5.0 (compatible)",
    ],
)  # fmt: skip
def test_scripted_http_clients_the_crawler_list_does_not_name_are_bots(ua):
    # Runtimes' and libraries' default user agents, API tools and headless DOMs: a partner
    # server that fires a pixel without X-Device-User-Agent, or a script, is not a reader.
    assert verdict(classifier(), Client("203.0.113.7", ua)) == "bot_user_agent"


BROWSERS = (
    CHROME,
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.6 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Version/17.6 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) "
    "SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like "
    "Gecko) Mobile/15E148 Instagram 350.0.0.26.91",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8 Build/AP2A; wv) AppleWebKit/537.36 (KHTML, like "
    "Gecko) Version/4.0 Chrome/131.0.6778.81 Mobile Safari/537.36",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 YaBrowser/24.10.0.0 Safari/537.36",
    # Native apps' own clients on the reader's device, and a desktop app's web view.
    "Dart/3.2 (dart:io)",
    "Alamofire/5.8.1",
    "MyForum/4.2 CFNetwork/1490.0.4 Darwin/23.2.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Slack/4.41.105 Chrome/128.0.6613.186 Electron/32.2.5 Safari/537.36",
)


@pytest.mark.parametrize("ua", BROWSERS)
def test_browsers_are_not_bots(ua):
    assert not BotDetector().is_bot(ua)


def test_a_browser_is_valid_and_the_detector_uses_the_maintained_list():
    assert verdict(classifier()) is None
    assert BotDetector().is_bot("Googlebot/2.1")
    assert not BotDetector(["NeverSeenBot"]).is_bot("Googlebot/2.1")


def test_a_token_bound_to_another_client_is_invalid():
    c = classifier()
    mine = client_binding(SIGNER, USER)
    assert verdict(c, bound_to=mine, binding=mine) is None
    for other in (Client("203.0.113.8", CHROME), Client("203.0.113.7", CHROME + " Edg/126")):
        assert verdict(c, other, bound_to=mine, binding=client_binding(SIGNER, other)) == (
            "client_mismatch"
        )


def test_binding_keeps_no_raw_address_and_tolerates_ipv6_privacy_addresses():
    a = client_binding(SIGNER, Client("2001:db8:1:2:aaaa::1", CHROME))
    b = client_binding(SIGNER, Client("2001:db8:1:2:bbbb::9", CHROME))
    assert a == b and "2001" not in a
    assert client_binding(SIGNER, Client("2001:db8:1:3::1", CHROME)) != a
    assert "203.0.113.7" not in client_key(SIGNER, USER)
    assert client_key(Signer(b"o" * 32), USER) != client_key(SIGNER, USER)  # keyed


def test_removed_publisher_is_invalid():
    assert verdict(classifier(), publisher_known=False) == "publisher_removed"


def test_a_revoked_partners_event_is_key_revoked_before_any_other_rule():
    # First: nothing of a revoked partner may count under another reason on its key row.
    c = classifier()
    bot = Client("203.0.113.7", "Googlebot/2.1")
    assert verdict(c, partner_live=False) == "key_revoked"
    assert verdict(c, bot, partner_live=False, publisher_known=False) == "key_revoked"
    click = c.classify_click(bot, key=client_key(SIGNER, bot), partner_live=False)
    assert click.reason == "key_revoked"


def test_impressions_per_client_rate():
    clock = FakeClock()
    c = classifier(clock, ivt_impressions=RateLimit(5, 300.0))
    assert [verdict(c) for _ in range(6)] == [None] * 5 + ["rate_limited"]
    assert verdict(c, Client("198.51.100.1", CHROME)) is None  # another client: its own rate
    assert verdict(c, rate_limited=False) is None  # a partner's pixel: no per-client rate
    clock.advance(299)
    assert verdict(c) == "rate_limited"  # still five within the last five minutes
    clock.advance(2)
    assert verdict(c) is None  # the window slid past them


def test_click_rates_one_a_minute_three_per_ten_minutes():
    clock = FakeClock()
    c = classifier(clock)
    key = client_key(SIGNER, USER)

    def click(**kw):
        return c.classify_click(USER, key=key, **kw).reason

    assert click() is None
    assert click() == "rate_limited"  # a second within the minute
    clock.advance(61)
    assert click() is None
    clock.advance(61)
    assert click() is None
    clock.advance(61)
    assert click() == "rate_limited"  # a fourth within ten minutes
    assert click(impression_seen=False) == "click_before_impression"


def test_the_operator_sets_the_click_rates():
    clock = FakeClock()
    c = classifier(clock, ivt_clicks=(RateLimit(2, 60.0),))
    key = client_key(SIGNER, USER)
    reasons = [c.classify_click(USER, key=key).reason for _ in range(3)]
    assert reasons == [None, None, "rate_limited"]  # two a minute, and no other window
    clock.advance(61)
    assert c.classify_click(USER, key=key).reason is None


def test_click_day_limit_is_a_true_sliding_day():
    clock = FakeClock()
    c = classifier(clock)
    key = client_key(SIGNER, USER)
    valid = 0
    for _ in range(48):
        clock.advance(1801)  # two an hour, 48 over one day: only 25 of them count
        valid += c.classify_click(USER, key=key).reason is None
    assert valid == 25
    clock.advance(86400)
    assert c.classify_click(USER, key=key).reason is None


def test_copies_of_one_click_judged_together_share_one_verdict_and_spend_once():
    # Two copies of one click in flight at once both reach the rules before either is
    # stored (the store then keeps one): the second must neither spend the allowance nor
    # be judged rate_limited by the first, whichever of them the store keeps.
    clock = FakeClock()
    c = classifier(clock)
    key = client_key(SIGNER, USER)

    def click(event_id):
        return c.classify_click(USER, key=key, event_id=event_id).reason

    assert click("clk-1") is None
    assert click("clk-1") is None  # its copy: the same verdict, nothing spent
    clock.advance(61)
    assert click("clk-2") is None
    clock.advance(61)
    assert click("clk-3") is None
    clock.advance(61)
    assert click("clk-4") == "rate_limited"  # a fourth genuine click within ten minutes


def test_a_resent_beacon_does_not_spend_the_clients_rate_again():
    c = classifier(ivt_impressions=RateLimit(2, 300.0))
    assert verdict(c, event_id="tok-1") is None
    assert verdict(c, event_id="tok-1") is None  # a resend: same verdict, nothing spent
    assert verdict(c, event_id="tok-1") is None
    assert verdict(c, event_id="tok-2") is None
    assert verdict(c, event_id="tok-3") == "rate_limited"
    assert verdict(c, event_id="tok-3") == "rate_limited"  # and stays what it was


def test_the_limiter_forgets_clients_whose_events_left_the_window_and_no_others():
    """Every ``_PRUNE_EVERY`` events the limiter drops the keys whose events are all older
    than its longest window, however long ago they were first seen, keeps every other key
    with its log, and answers as before."""
    from edge.ivt import WindowLimiter

    clock = FakeClock()
    limiter = WindowLimiter((RateLimit(2, 10.0), RateLimit(3, 100.0)), clock)
    every = WindowLimiter._PRUNE_EVERY
    assert limiter.allow("old") and limiter.allow("early-but-active")
    clock.advance(5)
    assert limiter.allow("stale")  # first seen after "early-but-active", never again
    clock.advance(45)
    assert limiter.allow("kept")
    clock.advance(40)
    assert limiter.allow("early-but-active")
    for i in range(every - 6):  # fresh keys, one event each, up to the prune
        assert limiter.allow(f"fresh-{i}")
    clock.advance(20)  # "old" and "stale" last acted over 100 s ago, "kept" 60 s ago
    assert limiter.allow("trigger")  # the event that prunes
    assert len(limiter) == every - 6 + 3  # "old" and "stale" alone are gone
    assert not {"old", "stale"} & set(limiter._log)
    assert list(limiter._log)[:2] == ["kept", "early-but-active"]  # by last event
    # Its log was kept: with the event at 50 s, its third in 100 s comes at 121 s.
    assert limiter.allow("kept")
    clock.advance(11)
    assert limiter.allow("kept")
    clock.advance(11)
    assert not limiter.allow("kept")
    clock.advance(200)
    for i in range(every):
        limiter.allow(f"late-{i}")
    assert set(limiter._log) == {f"late-{i}" for i in range(every)}
