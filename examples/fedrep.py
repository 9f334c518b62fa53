"""FedRep (Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for Personalized
Federated Learning", ICML 2021, Algorithm 1) written against the public API.

FedPer's split (``examples/fedper.py``: a shared body, each client's own head kept in its client state, the
body's Δ_i uploaded, the head's Δ 0, the personal model "current global body + own head"), with FedRep's
local training: from the global body and its own head, a client first trains the head alone for
``head_steps`` SGD steps (the body frozen), then the body alone for its remaining steps (the head frozen).
The alternation is a ``local_optimizer(lr_t, hp)`` whose update counts its steps and masks the frozen part's
step to 0 (the forward pass stays the model's training pass); the split is by module (``head_layers``).
FedRep's τ_h head *epochs* become a number of *steps*, ``head_steps`` (default 10; ``--hp head_steps=5``),
of the round's ``local_epochs · ⌈n_i / batch_size⌉``. Run it from the repository root:

    fedalf run --algorithm examples.fedrep:fedrep --model mlp --rounds 20

Differs from the authors' code (lgcollins/FedRep), which counts the head's phase in epochs
(``local_ep − local_rep_ep``) and the body's in epochs (``local_rep_ep``), where we count steps.
"""

import dataclasses

import jax
import jax.numpy as jnp
import optax

from examples.fedper import fedper, fedper_client, head_names


def fedrep(head_layers: int = 1):
    def local_optimizer(ctx):
        """SGD on the head for the first ``head_steps`` steps, on the body afterwards (the other part's step 0)."""
        lr_t, hp = ctx.lr, ctx.hp

        def update(grads, count, params=None):
            head = head_names(grads, head_layers)
            rate = lambda k: jnp.where((count < hp.own["head_steps"]) == (k in head), -lr_t, 0.0)  # noqa: E731
            return {k: jax.tree_util.tree_map(lambda x: rate(k) * x, g) for k, g in grads.items()}, count + 1
        return optax.GradientTransformation(lambda params: jnp.zeros((), jnp.int32), update)

    return dataclasses.replace(fedper(head_layers), name="fedrep", client=fedper_client(local_optimizer),
                               hparams={"head_steps": 10.0})
