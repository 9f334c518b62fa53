"""The simulation core: pytree arithmetic, client training, the round, algorithms, fair aggregation,
the QP and the privacy mechanisms. Pure JAX; imports neither ``problem`` nor ``experiment``."""
