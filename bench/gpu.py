"""``python bench/gpu.py``: every GPU number and the GPU tests in one command (``graphfeed.bench.gpu``).

Works with or without the project installed (the bare GPU image has only torch, CuPy and NumPy):
it puts this checkout's portions of the ``graphfeed`` namespace package first on ``sys.path``.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[0:1] = [str(REPO / root) for root in ("services", "trainer", "gpu_kernels", "bench")]

from graphfeed.bench.gpu import main  # noqa: E402

raise SystemExit(main())
