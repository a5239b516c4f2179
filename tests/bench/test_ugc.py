"""Section 2's split of the /v1/ugc/process tail: the posts the brand-safety second pass ran
on, and the p99 of the others."""

from types import SimpleNamespace

import pytest

from bench.ugc import first_pass_tail


def test_the_tail_without_the_second_pass_leaves_out_the_posts_due_for_it():
    posts = [f"post {i}" for i in range(100)]
    due = {"post 3", "post 50", "post 99"}  # the three slowest posts
    ms = [40.0 if p in due else 10.0 + i / 100 for i, p in enumerate(posts)]

    def check(texts):
        assert len(texts) == 1  # each post judged alone, as the edge judged it
        return [SimpleNamespace(second_pass=texts[0] in due)]

    run = {"ms": ms, "floor_p99": 8.0}
    (tail,) = first_pass_tail([run], [posts], check)
    assert tail["due"] == pytest.approx(0.03)
    # p99 of the 97 others (10.00 .. 10.98 ms, 97 values) over the floor's p99
    others = sorted(m for m, p in zip(ms, posts, strict=True) if p not in due)
    rank = 0.99 * (len(others) - 1)
    low = others[int(rank)]
    expected = low + (others[int(rank) + 1] - low) * (rank - int(rank))
    assert tail["p99_ratio"] == pytest.approx(expected / 8.0)
    assert tail["p99_ratio"] < 40.0 / 8.0


def test_every_post_due_leaves_no_first_pass_tail():
    run = {"ms": [20.0, 30.0], "floor_p99": 10.0}
    (tail,) = first_pass_tail([run], [["a", "b"]], lambda t: [SimpleNamespace(second_pass=True)])
    assert tail == {"due": 1.0, "p99_ratio": 0.0}
