"""The beacon bodies read in one C pass (``BodyFields``, ``schemas.struct_of``) accept and
refuse exactly what the schema validator does, with the same answer."""

from __future__ import annotations

import json
import random
import string

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.delivery import schemas
from edge.delivery.requests import BodyFields
from edge.delivery.validate import validate
from edge.errors import BadRequest, EdgeError
from edge.http import parse_json

FIELDS = ("impression_token", "impression_id")
READER = BodyFields(schemas.IMPRESSION_REQUEST, FIELDS)
STRUCT = msgspec.json.Decoder(schemas.struct_of("Impression", schemas.IMPRESSION_REQUEST))


def general(raw: bytes):
    """The general reading: (fields, None) or (None, the error's answer)."""
    try:
        body = parse_json(raw)
        validate(body, schemas.IMPRESSION_REQUEST)
    except EdgeError as exc:
        return None, (exc.status, exc.code, exc.message, exc.field)
    return tuple(body[f] for f in FIELDS), None


def read(raw: bytes):
    try:
        return READER(raw), None
    except EdgeError as exc:
        return None, (exc.status, exc.code, exc.message, exc.field)


def struct_accepts(raw: bytes) -> bool:
    try:
        STRUCT.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    return True


def check(raw: bytes) -> None:
    expected = general(raw)
    assert read(raw) == expected, raw
    if struct_accepts(raw):  # the fast reading never takes what the validator refuses
        assert expected[1] is None, raw


# Values near every rule of the schema: lengths at and past the limits, the pattern's
# characters and the characters it refuses (a final newline, control and format
# characters, astral ones), numbers at and past the ranges, the wrong JSON types.
_TEXT = [
    "", "a", "abcdefg", "abcdefgh", "a" * 64, "a" * 65, "abcdefgh\n", "abcd efgh",
    "imp-0000_0001", "abc\u200bdefgh", "é" * 8, "\U0001f600" * 8, "x" * 2048, "x" * 2049,
    "1.0.0", "1" * 32, "1" * 33, "v\n", "v\x00", "\u2028", "\ufeff", "\U0001f600",
]  # fmt: skip
_NUMBERS = [0, 1, -1, 0.5, 1.0, 1.5, -0.0, 86_400_000, 86_400_001, 1e300, 2**63, 2**64]
_OTHER = [None, True, False, [], {}, ["a"]]
_VALUES = [*_TEXT, *_NUMBERS, *_OTHER]
_KEYS = ["impression_token", "impression_id", "v", "visible_ratio", "visible_ms", "x", ""]


def _bodies(seed: int, count: int):
    rnd = random.Random(seed)
    valid = {"impression_token": "t.s", "impression_id": "imp-00000001", "v": "1.0.0"}
    for _ in range(count):
        body = dict(valid)
        for _ in range(rnd.randrange(0, 3)):
            key = rnd.choice(_KEYS)
            if rnd.random() < 0.2:
                body.pop(key, None)
            else:
                body[key] = rnd.choice(_VALUES)
        yield json.dumps(body).encode()


def test_generated_bodies_get_the_same_answer_both_ways():
    accepted = 0
    for raw in _bodies(16, 4000):
        check(raw)
        accepted += general(raw)[1] is None
    assert 500 < accepted < 3500  # both kinds well represented


@pytest.mark.parametrize(
    "raw",
    [
        b"", b" ", b"{", b"[]", b"null", b"1", b'"x"', b"{}",
        b'{"impression_token":"t","impression_id":"imp-00000001","v":"1"} x',
        b'{"impression_token":"t","impression_id":"imp-00000001","v":"1","v":"\\n"}',
        b'{"impression_token":"t","impression_id":"bad!","impression_id":"imp-00000001","v":"1"}',
        b'{"impression_token":"t","impression_id":"imp-00000001","v":"1","visible_ms":1e2}',
        b'{"impression_token":"t","impression_id":"imp-00000001","v":"1","visible_ms":1.0}',
        b'{"impression_token":"t","impression_id":"imp-00000001","v":"1","visible_ratio":1e400}',
        b'{"impression_token":"t","impression_id":"imp-00000001","v":"1","visible_ratio":null}',
        b'{"impression_token":"\\ud800","impression_id":"imp-00000001","v":"1"}',
        b'{"impression_token":"\xff","impression_id":"imp-00000001","v":"1"}',
        b'\xef\xbb\xbf{"impression_token":"t","impression_id":"imp-00000001","v":"1"}',
        b'{"impression_token":"t","impression_id":"imp-0000000\\u0031","v":"1"}',
        b'{"impression_token":"t","impression_id":"imp-00000001\\n","v":"1"}',
    ],
)  # fmt: skip
def test_edge_cases_get_the_same_answer_both_ways(raw):
    check(raw)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(_KEYS),
        st.one_of(
            st.text(alphabet=string.printable + "é\u200b\U0001f600", max_size=70),
            st.integers(min_value=-(2**70), max_value=2**70),
            st.floats(allow_nan=False, allow_infinity=False),
            st.booleans(),
            st.none(),
        ),
    )
)
def test_random_bodies_get_the_same_answer_both_ways(body):
    check(json.dumps(body).encode())


def test_a_refused_body_is_answered_by_the_validator():
    with pytest.raises(BadRequest) as err:
        READER(b'{"impression_token":"t","impression_id":"imp-00000001","v":"1","x":1}')
    assert (err.value.message, err.value.field) == ("unknown field 'x'", "x")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"type": "object", "properties": {}},  # open: no additionalProperties: false
        schemas.KEYWORDS_REQUEST,  # an array property
        schemas.FAILURE_REQUEST,  # an enum
    ],
)
def test_struct_of_refuses_what_it_cannot_express(schema):
    with pytest.raises(ValueError, match="Struct"):
        schemas.struct_of("X", schema)
