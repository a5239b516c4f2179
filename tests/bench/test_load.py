"""The load generators against the bare ceiling app: both count answers and failures."""

import shutil

import pytest

from bench.load import run_load
from bench.servers import BareServer


@pytest.mark.slow
@pytest.mark.parametrize("tool", ["wrk", "python"])
def test_load_generator_measures_the_bare_app(tool):
    if tool == "wrk" and shutil.which("wrk") is None:
        pytest.skip("Debian's wrk is not installed (make bench installs it)")
    bodies = [b'{"n": %d}' % i for i in range(500)]
    with BareServer(cpu=None) as server:
        res = run_load(
            server.url + "/dea/url/impression",
            bodies,
            headers={"Content-Type": "application/json"},
            connections=4,
            seconds=1,
            tool=tool,
        )
        assert res.requests > 50 and res.rps > 50
        assert res.non2xx == 0 and res.socket_errors == 0
        assert 0 < res.p50_ms <= res.p99_ms
        assert server.rss_mib > 5
