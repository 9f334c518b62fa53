"""Sweeps: many runs as vmapped programs (``sweep``), their plan (``sweep_plan``), memory (``sweep_memory``) and their folder's ``sweep.json`` (``sweepdir``)."""
