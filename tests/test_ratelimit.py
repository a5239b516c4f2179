"""GCRA per-key limits: burst, refill, Retry-After and the IETF RateLimit header fields."""

import pytest

from edge import ratelimit
from edge.errors import TooManyRequests
from edge.ratelimit import GcraLimiter, RateLimits
from edge.settings import RateLimit, Settings
from tests.conftest import FakeClock


def test_a_full_burst_passes_then_the_next_request_is_refused():
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(5, 1.0), clock)
    remaining = [limiter.check("k").remaining for _ in range(5)]
    assert remaining == [4, 3, 2, 1, 0]
    refused = limiter.check("k")
    assert not refused.allowed
    assert refused.retry_after_seconds == pytest.approx(0.2)


def test_the_bucket_refills_at_the_configured_rate():
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(10, 60.0), clock)  # one request every 6 s
    for _ in range(10):
        assert limiter.check("k").allowed
    assert not limiter.check("k").allowed
    clock.advance(5.9)
    assert not limiter.check("k").allowed
    clock.advance(0.2)
    assert limiter.check("k").allowed
    assert not limiter.check("k").allowed
    clock.advance(60)
    assert limiter.check("k").remaining == 9  # full again, never more than the burst


def test_keys_do_not_share_a_bucket():
    clock = FakeClock()
    limiter = GcraLimiter("ai", RateLimit(1, 1.0), clock)
    assert limiter.check("a").allowed
    assert not limiter.check("a").allowed
    assert limiter.check("b").allowed


def test_refusal_raises_429_with_retry_after_and_ratelimit_fields():
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(2, 10.0), clock)
    ok = limiter.enforce("k")
    assert ok == {"RateLimit-Policy": '"ugc";q=2;w=10', "RateLimit": '"ugc";r=1;t=5'}
    limiter.enforce("k")
    with pytest.raises(TooManyRequests) as info:
        limiter.enforce("k")
    err = info.value
    assert err.status == 429
    assert err.headers["Retry-After"] == "5"
    assert err.headers["RateLimit"] == '"ugc";r=0;t=10'
    assert err.headers["RateLimit-Policy"] == '"ugc";q=2;w=10'


def test_retry_after_is_at_least_one_second():
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(100, 1.0), clock)
    for _ in range(100):
        limiter.enforce("k")
    with pytest.raises(TooManyRequests) as info:
        limiter.enforce("k")
    assert info.value.headers["Retry-After"] == "1"


def test_a_clock_stepping_back_does_not_lock_keys_out():
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(2, 1.0), clock)
    limiter.check("k")
    limiter.check("k")
    assert not limiter.check("k").allowed
    clock.advance(-3600)  # an NTP step back by an hour
    assert limiter.check("k").allowed


def test_full_buckets_are_pruned_so_memory_stays_bounded():
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(10, 1.0), clock)
    for i in range(1000):
        limiter.check(f"key-{i}")
    clock.advance(2)
    for _ in range(1100):
        limiter.check("busy")
    assert len(limiter) == 1


def test_the_sweep_forgets_full_buckets_in_order_of_last_request(monkeypatch):
    monkeypatch.setattr(ratelimit, "_PRUNE_EVERY", 4)
    clock = FakeClock()
    limiter = GcraLimiter("ugc", RateLimit(10, 1.0), clock)  # a request costs 0.1 s
    limiter.check("early")  # TAT 0.1
    clock.advance(0.05)
    limiter.check("idle")  # TAT 0.15
    clock.advance(0.45)
    limiter.check("early")  # first seen first, but active since: TAT 0.6
    clock.advance(0.05)  # now 0.55: idle's bucket is full again, early's is not
    limiter.check("other")  # the fourth decision sweeps before it counts
    assert len(limiter) == 2  # idle forgotten; early and other kept
    assert limiter.check("early").remaining == 8  # early's bucket as its TAT says
    clock.advance(5)
    for _ in range(4):
        limiter.check("busy")
    assert len(limiter) == 1


def test_limits_come_from_the_settings_per_product():
    settings = Settings(rate_limit_ugc=RateLimit(7, 1.0), rate_limit_ad_manager=RateLimit(3, 2.0))
    limits = RateLimits.from_settings(settings, FakeClock())
    assert limits["ugc"].limit.requests == 7
    assert limits["ai"].limit == settings.rate_limit_ai
    assert limits["ad-manager"].headers(limits["ad-manager"].check("k"))["RateLimit-Policy"] == (
        '"ad-manager";q=3;w=2'
    )
