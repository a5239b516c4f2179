"""The catalogue's memory: large files parsed in a child process, repeated values shared,
ads found through one sorted array of ad numbers; the result is the same catalogue."""

from __future__ import annotations

import hashlib
import json

import orjson
import pytest

import matcher.catalogue as catalogue_module
from matcher.catalogue import Catalogue, CatalogueError, ad_number, load_catalogue, parse_catalogue
from matcher.data import __file__ as data_init
from matcher.types import Campaign
from tests.matcher.test_catalogue import doc

SANDBOX = (catalogue_module.Path(data_init).parent / "sandbox_catalogue.json").read_bytes()


@pytest.fixture
def child_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalogue_module, "CHILD_PARSE_BYTES", 0)


def test_a_child_parse_gives_the_same_catalogue(child_always: None) -> None:
    here = load_catalogue()  # the bundled file is far below the size limit... but 0 is not
    reference = catalogue_module._parse(SANDBOX)
    assert reference[1] == []
    assert here.campaigns == reference[0]
    assert here.content_hash == reference[2] == Catalogue(reference[0]).content_hash
    assert [p.ad.id for p in here.placements] == [
        a.id for c in reference[0] for s in c.ad_sets for a in s.ads
    ]


def test_a_child_parse_reports_every_error(child_always: None) -> None:
    d = doc({"ttl_seconds": 0, "cta": ""}, {"products": ["tv"]}, {"status": "x"})
    with pytest.raises(CatalogueError) as err:
        parse_catalogue(json.dumps(d))
    assert len(err.value.errors) == 4
    with pytest.raises(CatalogueError) as err:
        parse_catalogue(b"{")
    assert err.value.errors[0][0] == "$"


def test_the_content_hash_is_the_sorted_json_of_the_whole_catalogue() -> None:
    cat = load_catalogue()
    whole = {"campaigns": [c.as_dict() for c in cat.campaigns]}
    expected = hashlib.sha256(orjson.dumps(whole, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert cat.content_hash == expected


def test_repeated_values_are_one_object() -> None:
    d = doc({"keywords": ["trail running", "shoes"], "cta": "Shop now"})
    second = {**d["campaigns"][0]["ad_sets"][0]["ads"][0], "id": "ad-2"}
    d["campaigns"][0]["ad_sets"][0]["ads"].append(second)
    a, b = (p.ad for p in parse_catalogue(orjson.dumps(d)).placements)
    assert a.keywords == ("trail running", "shoes") and a.keywords is b.keywords
    assert a.cta is b.cta


def test_ads_are_found_by_id_and_number_and_nothing_else() -> None:
    cat = load_catalogue()
    for p in cat.placements:
        assert cat.placement(p.ad.id) is p
        assert cat.placement_by_number(ad_number(p.ad.id)) is p
    for n in (0, -1, 2**53, 2**64, 12345):
        assert cat.placement_by_number(n) is None
    assert cat.placement("nope") is None


def test_a_repeated_id_outside_a_file_resolves_to_its_last_placement() -> None:
    base = load_catalogue().campaigns[0]
    twice: list[Campaign] = [base, base]
    cat = Catalogue(twice)
    p = cat.placement(base.ad_sets[0].ads[0].id)
    assert p is cat.placements[len(cat.placements) // 2]
