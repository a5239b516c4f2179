"""edge.partner.flow: the sandbox's deterministic no-match sample."""

from edge.partner.flow import SANDBOX_NO_MATCH_ONE_IN, sandbox_no_match


def test_sandbox_sample_is_stable_and_about_one_in_five():
    ids = [f"post-{i}" for i in range(2000)]
    first = [sandbox_no_match(i) for i in ids]
    assert first == [sandbox_no_match(i) for i in ids]  # the same answer every run
    share = sum(first) / len(ids)
    assert abs(share - 1 / SANDBOX_NO_MATCH_ONE_IN) < 0.03
