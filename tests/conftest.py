import os

# Tests run on the CPU with small synthetic data; keep XLA from grabbing every core's worth of threads
# beyond what the 2-core CI machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The CLI's persistent compilation cache (~/.cache/fedalf_jax/jax) stays off in tests, also in the CLI
# subprocesses they start; tests/test_startup.py turns it on in folders of its own.
os.environ.setdefault("FEDALF_COMPILE_CACHE", "off")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
