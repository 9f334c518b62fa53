"""``fedalf bench``: how fast a round runs, and why.

* :mod:`.timing`: the compiled round against a sequential per-client loop (:func:`bench`), the vmapped
  sweep against its runs one after another (:func:`bench_sweep`), FedAvg's CNN round against a lean
  PyTorch loop (``--pytorch``).
* :mod:`.depth` and :mod:`.hlo`: the server step's sequential depth and every loop trip of a program
  round, read from the compiled programs (:func:`server_depth`).
* :mod:`.suite`: a fixed list of measurements (``--suite``), one JSON each as soon as it is measured.
* :mod:`.stop`: Ctrl-C stops the measurement in flight and keeps what was measured.
* :mod:`.table`: the printed tables.
"""

from __future__ import annotations

from .depth import all_loops, server_depth
from .stop import BenchStopped, ctrl_c_stops, say, stoppable
from .suite import SUITE_HEADER, SUITE_PARTS, SUITES, bench_suite, is_out_of_memory, suite_line, suite_plan
from .table import duration, format_bench, format_bench_sweep, sig
from .timing import (MAKE_PYTORCH, TORCH_SCRIPT, bench, bench_sweep, check_pytorch, check_pytorch_config,
                     make_sequential, predict_width_s, PytorchLoop, pytorch_args, sequential_round, server_seconds)

__all__ = [
    "bench", "bench_sweep", "make_sequential", "sequential_round", "server_seconds", "predict_width_s",
    "TORCH_SCRIPT", "MAKE_PYTORCH", "check_pytorch", "check_pytorch_config", "pytorch_args", "PytorchLoop",
    "server_depth", "all_loops", "BenchStopped", "ctrl_c_stops", "say", "stoppable", "SUITES", "SUITE_PARTS",
    "SUITE_HEADER", "suite_plan", "bench_suite", "is_out_of_memory", "suite_line", "sig", "duration",
    "format_bench", "format_bench_sweep",
]
