"""The text the matcher reads: disguised letters read as the letters a reader sees."""

from __future__ import annotations

import time

import pytest

from matcher.state import ThreadState
from matcher.text import as_read
from matcher.types import MatchRequest

NOW = 1_790_000_000.0
FULLWIDTH = "".join(c if c == " " else chr(0xFEE0 + ord(c)) for c in "kill myself")
CYRILLIC_I, CYRILLIC_U = "\u0456", "\u0443"
ZWSP = "\u200b"


@pytest.mark.parametrize(
    ("text", "read"),
    [
        (f"I want to {FULLWIDTH} tonight", "I want to kill myself tonight"),
        (f"k{CYRILLIC_I}ll m{CYRILLIC_U}self", "kill myself"),
        (f"ki{ZWSP}ll my{ZWSP}self", "kill myself"),
        ("I want to k i l l m y s e l f tonight", "I want to killmyself tonight"),
        ("so k i l l me", "so kill me"),
        ("i w4nt t0 d13, n0b0dy w0uld n0t1c3", "i want to die, nobody would notice"),
        ("K1LL mys3lf", "kill myself"),
        ("an i7 l4pt0p", "an i7 laptop"),
        ("w4nt t0 d13", "want to die"),
        ("i w4nt t0 3nd 1t 4ll", "i want to end it all"),
        # Left as written: a word wholly in another script, accents, emoji, two letters.
        ("Москва и Київ", "Москва и Київ"),
        ("café naïve São Paulo 🍕", "café naïve São Paulo 🍕"),
        ("plan a b", "plan a b"),
        # Digits: product and unit names, and a short word with no longer disguised one.
        ("ps5 vs xbox, 4k tv, i7 cpu, mp3 player", "ps5 vs xbox, 4k tv, i7 cpu, mp3 player"),
        (
            "offered $7k, listings are $10k, is $3k worth it",
            "offered $7k, listings are $10k, is $3k worth it",
        ),
        ("rtx3070 vs rx6800 at 1440p, 2nd hand", "rtx3070 vs rx6800 at 1440p, 2nd hand"),
        ("a4 paper and 5g phones, b12 and d3", "a4 paper and 5g phones, b12 and d3"),
        (
            "Galaxy S5, A5 or M3? 21st, 11th, 3rd, 64gb, 10am",
            "Galaxy S5, A5 or M3? 21st, 11th, 3rd, 64gb, 10am",
        ),
        ("my dog won't eat his kibble", "my dog won't eat his kibble"),
    ],
)
def test_disguised_letters_read_as_a_reader_reads_them(text, read):
    assert as_read(text) == read


@pytest.mark.parametrize(
    "text",
    [
        f"I want to {FULLWIDTH} tonight, nothing matters anymore Any dog food tips? my pup will "
        "not touch his kibble",
        f"I want to k{CYRILLIC_I}ll m{CYRILLIC_U}self tonight, nothing matters anymore Any dog "
        "food tips? my pup will not touch his kibble",
        "I want to k i l l m y s e l f tonight Any dog food tips? my pup will not touch his kibble",
        "i w4nt t0 d13. n0b0dy w0uld 3v3n n0t1c3 1f 1 w4s g0n3. any dog food tips? my pup will "
        "not touch his kibble",
        "i w4nt t0 d13. any dog food tips? my pup will not touch his kibble",
        "i w4nt t0 3nd 1t 4ll any dog food tips? my pup will not touch his kibble",
    ],
)
def test_self_harm_in_disguised_letters_gets_no_ad(shared_matcher, text):
    result = shared_matcher.decide(
        MatchRequest(product="ugc", content=text), ThreadState(), NOW, {}
    )
    assert (result.outcome, result.reason) == ("no_match", "unsafe")


def test_an_ai_prompt_in_disguised_letters_is_read_too(shared_matcher):
    request = MatchRequest(
        product="ai",
        prompt=f"I want to {FULLWIDTH}. what should I eat for dinner?",
        content="Soup is a simple, comforting dinner.",
    )
    result = shared_matcher.decide(request, ThreadState(), NOW, {})
    assert (result.outcome, result.reason) == ("no_match", "unsafe")


def test_a_long_run_of_letters_and_digits_is_read_in_linear_time():
    # A run longer than any word of the vocabulary is never a disguised word; reading it
    # once took seconds (a pattern that backtracked over every way to split the run).
    text = "a" + "0" * 39_998 + "9"  # read the old way: ~9 s; now: a few ms
    started = time.perf_counter()
    assert as_read(text) == text
    assert time.perf_counter() - started < 1.0
