"""``edge catalogue validate``: exit status, every error with its JSON path, --json."""

from __future__ import annotations

import json

from edge.cli import main

BROKEN = {
    "campaigns": [
        {
            "id": "c1",
            "advertiser_name": "Acme",
            "status": "live",
            "budget": 10,
            "ad_sets": [
                {
                    "id": "s1",
                    "products": ["ugc"],
                    "pricing_model": {"type": "cpc", "bid_amount": -1},
                    "ads": [{"id": "a1", "title": "T", "cta": "Go", "description": "d"}],
                }
            ],
        }
    ]
}


def test_valid_bundled_catalogue(capsys):
    from importlib import resources

    path = resources.files("matcher.data").joinpath("sandbox_catalogue.json")
    assert main(["catalogue", "validate", str(path)]) == 0
    out = capsys.readouterr().out
    # The statuses count campaigns, and stand beside them, not beside the ads.
    assert "valid; 42 campaigns (" in out
    assert out.rstrip().endswith(" ads")


def test_every_error_with_its_path(tmp_path, capsys):
    f = tmp_path / "cat.json"
    f.write_text(json.dumps(BROKEN))
    assert main(["catalogue", "validate", str(f)]) == 1
    err = capsys.readouterr().err
    for line in (
        "$.campaigns[0].status: expected active, paused or archived, got 'live'",
        "$.campaigns[0].budget: unknown field",
        "$.campaigns[0].ad_sets[0].pricing_model.bid_amount: must be from",
        "$.campaigns[0].ad_sets[0].ads[0].click_through_url: required field is missing",
        "$.campaigns[0].ad_sets[0].ads[0].ttl_seconds: required field is missing",
    ):
        assert line in err, err
    assert "5 error(s)" in err


def test_json_output(tmp_path, capsys):
    f = tmp_path / "cat.json"
    f.write_text(json.dumps(BROKEN))
    assert main(["catalogue", "validate", "--json", str(f)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False
    assert {"path": "$.campaigns[0].budget", "message": "unknown field"} in out["errors"]


def test_unreadable_and_not_json(tmp_path, capsys):
    assert main(["catalogue", "validate", str(tmp_path / "missing.json")]) == 1
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["catalogue", "validate", str(bad)]) == 1
    assert "$: not valid JSON" in capsys.readouterr().err


def test_an_empty_catalogue_is_valid_and_says_so_plainly(tmp_path, capsys):
    f = tmp_path / "empty.json"
    f.write_text('{"campaigns": []}')
    assert main(["catalogue", "validate", str(f)]) == 0
    assert capsys.readouterr().out.strip().endswith("valid; 0 campaigns, 0 ad sets, 0 ads")


def _doc_example() -> dict:
    """The example catalogue of docs/catalogue.md, as a reader copies it."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "catalogue.md").read_text()
    block = doc.split("## Example", 1)[1]
    return json.loads(re.search(r"```json\n(.*?)```", block, flags=re.S).group(1))


def test_the_documented_example_is_valid_and_serves_today(tmp_path, capsys):
    path = tmp_path / "ads.json"
    path.write_text(json.dumps(_doc_example()))
    assert main(["catalogue", "validate", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == f"{path}: valid; 1 campaigns (1 active), 1 ad sets, 1 ads"
    assert err == ""  # inside its flight: nothing to note


def test_active_campaigns_outside_their_flight_are_named(tmp_path, capsys):
    doc = _doc_example()
    ended = doc["campaigns"][0]
    ahead = {**ended, "id": "cmp-2", "start_at": "2099-01-01T00:00:00Z", "end_at": None}
    paused = {**ended, "id": "cmp-3", "status": "paused"}  # not serving anyway: no note
    ended["end_at"] = "2026-02-01T00:00:00Z"
    for i, c in enumerate((ahead, paused)):
        c["ad_sets"] = [{**c["ad_sets"][0], "id": f"as-{i + 2}",
                         "ads": [{**c["ad_sets"][0]["ads"][0], "id": f"ad-{i + 2}"}]}]  # fmt: skip
    doc["campaigns"] += [ahead, paused]
    path = tmp_path / "ads.json"
    path.write_text(json.dumps(doc))
    assert main(["catalogue", "validate", str(path)]) == 0  # valid all the same
    err = capsys.readouterr().err
    assert "1 active campaign(s) ended (end_at is past), serving nothing now: cmp-1" in err
    assert "not started yet (start_at is ahead), serving nothing now: cmp-2" in err
    assert "cmp-3" not in err
    assert main(["catalogue", "validate", "--json", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["outside_flight"] == {"expired": ["cmp-1"], "not_started": ["cmp-2"]}
