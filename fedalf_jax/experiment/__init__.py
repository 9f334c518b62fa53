"""Experiments: configuration, building a run, the run loop, run directories, sweeps, metrics and metric
writers (reports: :mod:`fedalf_jax.reporting`; benchmarks: :mod:`fedalf_jax.bench`)."""
