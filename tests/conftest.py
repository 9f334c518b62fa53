import os

# Tests run on the CPU with small synthetic data; keep XLA from grabbing every core's worth of threads
# beyond what the 2-core CI machine has.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")
