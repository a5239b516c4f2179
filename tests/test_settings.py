import base64
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from edge.settings import RateLimit, Settings, SettingsError, describe


def test_defaults_need_no_environment():
    s = Settings.from_sources({}, {})
    assert s.env == "production"
    assert s.db == Path("var/edge.db")
    assert s.base_url == "http://127.0.0.1:8000"
    assert s.trusted_proxies == ()


def test_flag_beats_environment_beats_default():
    env = {"EDGE_PORT": "9001", "EDGE_ENV": "sandbox"}
    s = Settings.from_sources({"port": "9002"}, env)
    assert s.port == 9002
    assert s.env == "sandbox"
    assert s.key_env_prefix == "sandbox"


def test_typed_parsing():
    s = Settings.from_sources(
        {},
        {
            "EDGE_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1",
            "EDGE_LEGACY_API": "yes",
            "EDGE_RATE_LIMIT_UGC": "600/60s",
            "EDGE_PUBLIC_BASE_URL": "https://edge.example.com/",
        },
    )
    assert [str(n) for n in s.trusted_proxies] == ["10.0.0.0/8", "192.168.1.1/32"]
    assert s.legacy_api is True
    assert s.rate_limit_ugc == RateLimit(600, 60.0)
    assert s.rate_limit_ugc.per_second == 10
    assert s.base_url == "https://edge.example.com"


@pytest.mark.parametrize(
    ("var", "value", "named"),
    [
        ("EDGE_PORT", "eighty", "EDGE_PORT"),
        ("EDGE_PORT", "70000", "EDGE_PORT"),
        ("EDGE_ENV", "staging", "EDGE_ENV"),
        ("EDGE_LEGACY_API", "maybe", "EDGE_LEGACY_API"),
        ("EDGE_TRUSTED_PROXIES", "10.0.0.0/8,proxy", "EDGE_TRUSTED_PROXIES"),
        ("EDGE_RATE_LIMIT_AI", "fast", "EDGE_RATE_LIMIT_AI"),
        ("EDGE_PUBLIC_BASE_URL", "ftp://x", "EDGE_PUBLIC_BASE_URL"),
        ("EDGE_SIGNING_KEY", "short", "EDGE_SIGNING_KEY: expected at least 32 characters"),
        # Empty (a templated env file left blank): it listened on every interface and
        # built public URLs such as http://:8000/dea/tag.js.
        ("EDGE_HOST", "", "EDGE_HOST: expected an address to listen on"),
        ("EDGE_HOST", "  ", "EDGE_HOST: expected an address to listen on"),
        ("EDGE_HOST", "not a host", "EDGE_HOST: expected an address to listen on"),
    ],
)
def test_bad_values_fail_at_start_with_the_variable_named(var, value, named):
    with pytest.raises(SettingsError, match=named):
        Settings.from_sources({}, {var: value})


def test_bad_flag_is_named_as_a_flag():
    with pytest.raises(SettingsError, match="--port"):
        Settings.from_sources({"port": "x"}, {})


@pytest.mark.parametrize("value", ["10/.s", "10/..s", "10/1.2.3s", "10/-1s", "10/s/s", "/s"])
def test_a_bad_rate_limit_says_what_is_expected(value):
    with pytest.raises(SettingsError) as refused:
        Settings.from_sources({}, {"EDGE_RATE_LIMIT_UGC": value})
    assert str(refused.value) == (
        "EDGE_RATE_LIMIT_UGC: expected REQUESTS/PERIOD such as 20/s, 600/60s or 1000/h, "
        f"got {value!r}"
    )


@pytest.mark.parametrize(
    ("value", "limit"),
    [("10/s", RateLimit(10, 1.0)), ("10/.5s", RateLimit(10, 0.5)), ("10/2.m", RateLimit(10, 120.0)),
     (" 5 / 1.5 h ", RateLimit(5, 5400.0))],
)  # fmt: skip
def test_rate_limit_periods(value, limit):
    assert Settings.from_sources({}, {"EDGE_RATE_LIMIT_AI": value}).rate_limit_ai == limit


def test_click_rates_are_a_list_of_rates_and_default_to_the_industry_windows():
    assert Settings().ivt_clicks == (
        RateLimit(1, 60.0),
        RateLimit(3, 600.0),
        RateLimit(10, 3600.0),
        RateLimit(25, 86400.0),
    )
    given = Settings.from_sources({}, {"EDGE_IVT_CLICKS": " 2/m , 5/10m,"}).ivt_clicks
    assert given == (RateLimit(2, 60.0), RateLimit(5, 600.0))
    for value, expected in (("", "expected one or more"), ("2/m,lots", "got 'lots'")):
        with pytest.raises(SettingsError, match=expected) as refused:
            Settings.from_sources({}, {"EDGE_IVT_CLICKS": value})
        assert str(refused.value).startswith("EDGE_IVT_CLICKS: ")


def test_host_is_taken_without_surrounding_blanks():
    assert Settings.from_sources({}, {"EDGE_HOST": " 0.0.0.0 "}).host == "0.0.0.0"
    with pytest.raises(SettingsError, match="--host"):
        Settings.from_sources({"host": ""}, {})


@pytest.mark.parametrize("value", ["::1", "[::1]"])
def test_an_ipv6_host_is_bracketed_in_the_edges_own_urls(value):
    settings = Settings.from_sources({}, {"EDGE_HOST": value, "EDGE_PORT": "8443"})
    assert settings.host == "::1"  # what a socket binds
    assert settings.base_url == "http://[::1]:8443"


def test_settings_are_frozen():
    s = Settings()
    with pytest.raises(AttributeError):
        s.port = 1  # type: ignore[misc]


def test_secret_is_not_in_repr():
    key = secrets.token_urlsafe(32)
    s = Settings.from_sources({}, {"EDGE_SIGNING_KEY": key})
    assert s.signing_key == key
    assert key not in repr(s)


MAKE_A_KEY = "make one with: openssl rand -base64 48"


@pytest.mark.parametrize(
    "key",
    [
        "CHANGE-ME-to-the-same-48-random-characters-everywhere",  # an earlier example's
        "CHANGE-ME",
        "change-me",
        pytest.param(secrets.token_urlsafe(32) + "Change-Me", id="inside-a-random-key"),
    ],
)
def test_the_example_placeholder_is_refused_as_a_signing_key(key):
    # Left in the env file, it would sign every token and AI URL with a key the whole
    # world can read in this repository: anyone could mint billable impressions and clicks.
    with pytest.raises(SettingsError) as refused:
        Settings.from_sources({}, {"EDGE_SIGNING_KEY": key})
    assert str(refused.value) == (
        "EDGE_SIGNING_KEY: this is the example's placeholder (it holds CHANGE-ME), "
        f"not a secret; {MAKE_A_KEY}"
    )


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("a" * 32, "uses fewer than 8 different characters"),
        ("abcd" * 8, "uses fewer than 8 different characters"),
        ("my-production-key-" + "x" * 30, "is mostly one character"),
        ("0123456789abcdef" * 2, "repeats a shorter piece"),
        ("my-edge-signing-key!" * 2, "repeats a shorter piece"),
    ],
)
def test_a_signing_key_that_is_obviously_not_random_is_refused(key, why):
    with pytest.raises(SettingsError) as refused:
        Settings.from_sources({}, {"EDGE_SIGNING_KEY": key})
    assert (
        str(refused.value)
        == f"EDGE_SIGNING_KEY: expected random text, but this key {why}; {MAKE_A_KEY}"
    )
    assert key not in str(refused.value)


def test_a_refused_signing_key_flag_is_named_as_a_flag():
    with pytest.raises(SettingsError, match=f"^--signing-key: .*; {MAKE_A_KEY}$"):
        Settings.from_sources({"signing_key": "a" * 40}, {})


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: secrets.token_urlsafe(32), id="token_urlsafe"),  # the tests' own
        pytest.param(lambda: base64.b64encode(os.urandom(48)).decode(), id="base64-48"),
        # Hex has 16 symbols only: a 32-character key shows about 14 of them.
        pytest.param(lambda: secrets.token_hex(32), id="hex-64"),
        pytest.param(lambda: secrets.token_hex(16), id="hex-32"),
    ],
)
def test_a_random_signing_key_is_taken(make):
    for _ in range(200):
        key = make()
        assert Settings.from_sources({}, {"EDGE_SIGNING_KEY": key}).signing_key == key


def test_an_empty_signing_key_means_the_one_kept_in_the_database():
    assert Settings.from_sources({}, {"EDGE_SIGNING_KEY": ""}).signing_key is None


def test_every_setting_has_help():
    rows = list(describe())
    assert rows
    for name, var, _default, help_text in rows:
        assert var == "EDGE_" + name.upper()
        assert help_text.strip().endswith(".") or help_text.strip().endswith(")"), name


def test_sandbox_refuses_a_catalogue_of_live_demand():
    with pytest.raises(SettingsError, match="EDGE_CATALOGUE"):
        Settings.from_sources({}, {"EDGE_ENV": "sandbox", "EDGE_CATALOGUE": "demand.json"})
    assert Settings.from_sources({}, {"EDGE_CATALOGUE": "demand.json"}).catalogue is not None


def test_an_edge_variable_that_names_no_setting_is_a_warning_not_a_refusal(caplog):
    environ = {
        "EDGE_WORKER": "4",
        "EDGE_TOKENFORM": "json",
        "EDGE_NOT_ANYTHING_LIKE_IT": "1",
        "EDGE_QA_KEY": "read by the QA kit",
        "EDGE_TEST_PG_BIN": "/usr/lib/postgresql/15/bin",
        "EDGE_WORKERS": "2",
        "OTHER_WORKER": "4",
    }
    with caplog.at_level(logging.WARNING, logger="edge.settings"):
        settings = Settings.from_sources({}, environ)
    assert settings.workers == 2
    assert [r.getMessage() for r in caplog.records] == [
        "EDGE_NOT_ANYTHING_LIKE_IT is not a setting of this edge and is ignored",
        "EDGE_TOKENFORM is not a setting of this edge and is ignored; did you mean "
        "EDGE_TOKEN_FORM?",
        "EDGE_WORKER is not a setting of this edge and is ignored; did you mean EDGE_WORKERS?",
    ]


def test_a_command_names_a_misspelt_edge_variable(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_")}
    env.update(EDGE_WORKER="4", EDGE_DB=str(tmp_path / "edge.db"))
    result = subprocess.run(
        [sys.executable, "-m", "edge", "keys", "issue", "--env", "production", "--product", "ugc"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "EDGE_WORKER is not a setting" in result.stderr
    assert "did you mean EDGE_WORKERS?" in result.stderr
