"""The layer zoo: one module per component family; importing this package registers them all.

The registry imports this package through the entry point `builtin` of the group
`cem_ablate.components` (pyproject.toml), exactly as it imports third-party plugins.
To add a component: write one module here that decorates its class with
`cem_ablate.registry.register(kind, name, options=..., description=...)` and add one
import line below (or ship it in another package under the same entry-point group).
Kinds looked up by the model: attention, mlp, preconditioner. RMSNorm, RoPE and ALiBi
are building blocks of those, imported directly, not registered.
"""

from components import (  # noqa: F401  (imported for registration)
    cem_attention,
    cem_mlp,
    hopfield_mlp,
    llama_attention,
    preconditioner,
    swiglu,
)
