"""``python -m bench``: the measured figures of BENCHMARKS.md (``make bench``).

Every figure is a ratio measured side by side in one run (the edge against a bare ASGI app on
the same core, a /v1 call against the embedding model's own forward pass on the same core),
the median of several runs with the spread, because the absolute numbers of a shared machine
mean little. Sections: ingest, ugc, matcher, tag (``--only SECTION``).
"""
