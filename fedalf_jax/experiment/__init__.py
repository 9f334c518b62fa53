"""Experiments: configuration, building a run, the run loop, run directories, sweeps, reports,
benchmarks, metrics and metric writers."""
