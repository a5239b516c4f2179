"""``python -m bench.cores``: which worker counts it measures, and its arguments."""

import os
import shutil

import orjson
import pytest

from bench import cores
from bench.load import run_load
from bench.servers import BareServer, pin_to


def test_worker_counts_double_up_to_the_cores_the_load_leaves():
    assert cores._counts(16, 4) == [1, 2, 4, 8, 12]
    assert cores._counts(16, 8) == [1, 2, 4, 8]
    assert cores._counts(2, 1) == [1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--load-cores", "0"],
        ["--load-cores", str(os.cpu_count() or 1)],
        ["--workers", "1,x"],
        ["--workers", "0"],
        ["--workers", str(os.cpu_count() or 1)],
        ["--runs", "0"],
    ],
)
def test_bad_arguments_are_refused_with_a_message(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cores._parse(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_set_of_cores_pins_a_child_to_all_of_them():
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores and sched_setaffinity")
    assert pin_to({0, 1}) is not None
    assert pin_to({0, os.cpu_count() or 1}) is None  # a core the machine lacks


@pytest.mark.slow
def test_wrk_loads_from_several_cores():
    if shutil.which("wrk") is None:
        pytest.skip("Debian's wrk is not installed (make bench installs it)")
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two cores")
    with BareServer(cpu=None) as server:
        res = run_load(
            server.url + "/dea/url/impression",
            [b'{"n": %d}' % i for i in range(500)],
            headers={"Content-Type": "application/json"},
            connections=4,
            seconds=1,
            cpus={0, 1},
        )
    assert res.tool == "wrk" and res.requests > 50
    assert res.non2xx == 0 and res.socket_errors == 0


def test_only_wrk_loads_from_several_cores():
    with pytest.raises(ValueError, match="only wrk"):
        run_load(
            "http://127.0.0.1:9/",
            [b"{}"],
            headers={},
            connections=1,
            seconds=1,
            tool="python",
            cpus={0, 1},
        )


def test_each_group_of_beacons_comes_from_a_client_address_of_its_own():
    from bench.load import client_address

    assert [client_address(i, 4) for i in (0, 3)] == ["3.0.0.0", "3.0.0.0"]
    assert client_address(4, 4) == "3.0.0.1"
    assert client_address(4 * 256, 4) == "3.0.1.0"
    assert client_address(4 * 65536, 4) == "3.1.0.0"


def test_beacon_clients_pass_the_geofence_as_public_us_visitors():
    from bench.load import client_address
    from geoip.fence import us_only
    from geoip.reader import open_reader

    geo = open_reader()
    for i in (0, 4, 4 * 256 + 3, 4 * 65536 * 255):
        verdict = us_only(geo, client_address(i, 4), allow_private=False)
        assert (verdict.allowed, verdict.reason) == (True, "us")


def test_each_beacon_token_is_bound_to_the_client_that_sends_it():
    import time

    import orjson

    from bench import edge_env
    from bench.ingest import mint_bodies
    from bench.load import client_address
    from edge.beacons import read_impression_token
    from edge.ivt import Client, client_binding
    from edge.signing import Signer

    signer = Signer(b"k" * 32)

    def bound_to(body: bytes) -> str | None:
        token = orjson.loads(body)["impression_token"]
        now = time.time()
        return read_impression_token(signer, token, surface="url", env="production", now=now).client

    bodies = mint_bodies(signer, 9, edge_env.bench_ad(), clients_every=4)
    clients = [Client(client_address(i, 4), edge_env.BROWSER_UA) for i in range(9)]
    assert [bound_to(b) for b in bodies] == [client_binding(signer, c) for c in clients]
    assert len({bound_to(b) for b in bodies}) == 3  # one binding per client of 4 beacons
    assert bound_to(mint_bodies(signer, 1, edge_env.bench_ad(), clients_every=0)[0]) is None


@pytest.mark.parametrize("synthetic_catalogue", [False, True], ids=["bundled", "synthetic"])
def test_the_bench_ad_is_a_cpm_ad_of_the_live_catalogue(synthetic_catalogue):
    """The beacons' tokens name a CPM ad of a campaign the benchmarked edge serves: one of
    a campaign missing from the live catalogue would bill nothing, and the benchmark
    would skip the billing, spend and billed counters it claims to measure."""
    from bench import edge_env, synthetic
    from matcher.catalogue import Catalogue, load_catalogue, parse_catalogue

    ad = edge_env.bench_ad(synthetic_catalogue)
    catalogue: Catalogue = (
        parse_catalogue(orjson.dumps(synthetic.catalogue_dict(100)))
        if synthetic_catalogue
        else load_catalogue()
    )
    placement = catalogue.placement(ad.ad_id)
    assert placement is not None and placement.campaign.id == ad.campaign_id
    assert placement.ad_set.pricing_model.type == "cpm"
    budget = placement.campaign.budget_usd
    assert budget is None or budget >= 10_000
    assert placement.campaign.daily_cap_usd is None
