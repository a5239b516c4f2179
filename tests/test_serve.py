"""``edge serve`` as a user runs it: a real uvicorn process on a free port."""

import json
import urllib.error
import urllib.request

import pytest

from edge.qa import EdgeProcess


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


@pytest.mark.slow
def test_serve_answers_health_and_404s_over_real_http(tmp_path):
    with EdgeProcess(db=tmp_path / "edge.db") as edge:
        status, headers, body = _get(edge.url + "/v1/ugc/health")
        assert status == 200 and body["env"] == "production"
        assert "server" not in {k.lower() for k in headers}
        status, _, body = _get(edge.url + "/ugc/process")
        assert status == 404 and body["error"]["code"] == "not_found"
    assert (tmp_path / "edge.db").exists()


@pytest.mark.slow
def test_serve_refuses_a_bad_setting_with_its_name(tmp_path):
    edge = EdgeProcess(db=tmp_path / "edge.db", settings={"EDGE_RATE_LIMIT_UGC": "lots"})
    with pytest.raises(RuntimeError, match="EDGE_RATE_LIMIT_UGC"):
        edge.start()
