"""The contextual ad edge: partner API (/v1), delivery edge (/dea), sandbox, command line."""

import os

__version__ = "0.1.0"

# One BLAS thread per process, set before the matcher imports numpy: the edge scales by
# processes, and OpenBLAS threads sharing a pinned core only contend with the event loop
# (BENCHMARKS.md section 3: 2.5x -> 1.2x the forward pass at 10k ads). An operator's own
# value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
