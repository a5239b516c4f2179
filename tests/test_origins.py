"""Origins as browsers send them: the canonical form publishers register and routes compare."""

import pytest

from edge.origins import normalise_origin


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://a.example", "https://a.example"),
        ("HTTP://A.Example:80", "http://a.example"),
        ("http://127.0.0.1:8001/", "http://127.0.0.1:8001"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("http://[0:0::1]", "http://[::1]"),
        # An internationalised host as a browser's Origin carries it: IDNA (UTS 46,
        # non-transitional: "ß" is kept, not turned into "ss"), ideographic full stop a dot.
        ("https://bücher.example", "https://xn--bcher-kva.example"),
        ("https://BÜCHER.example:443/", "https://xn--bcher-kva.example"),
        ("https://xn--bcher-kva.example", "https://xn--bcher-kva.example"),
        ("https://straße.example", "https://xn--strae-oqa.example"),
        ("https://例え\u3002テスト", "https://xn--r8jz45g.xn--zckzah"),
        # ASCII hosts browsers send as they are, though not strict DNS host names.
        ("https://my_host.example", "https://my_host.example"),
        ("https://r3---sn-abc.example", "https://r3---sn-abc.example"),
    ],
)
def test_normalise_origin(text, expected):
    assert normalise_origin(text) == expected


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("a.example", "http(s)://host"),
        ("ftp://a.example", "http(s)://host"),
        ("https://a.example/path", "no path"),
        ("https://u:p@a.example", "credentials"),
        ("https://u@a.example", "credentials"),
        ("https://a.example?q=1", "no path, query"),
        ("https://a.example:99999", "not an origin"),
        ("https://", "http(s)://host"),
        # Hosts no browser sends, so they could never match an Origin header.
        ("https://a b.example", "no space"),
        ("https://*.example.com", "'*' wildcard"),
        ("https://a..example", "joined by dots"),
        ("https://a.example.", "joined by dots"),
        ("https://exa%41mple.com", "letters, digits"),
        ("https://" + "a" * 64 + ".example", "letters, digits"),
        ("https://bü\u00a0cher.example", "internationalised"),
    ],
)
def test_bad_origins_are_refused(bad, words):
    with pytest.raises(ValueError) as err:
        normalise_origin(bad)
    assert words in str(err.value)
