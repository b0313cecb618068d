"""The layer zoo: one module per component family; importing this package registers them all.

To add a component: write one module here that decorates its class with
`cem_ablate.registry.register(kind, name, options=..., description=...)` and add one
import line below (or ship it in another package through the `cem_ablate.components`
entry-point group).
"""

from components import (  # noqa: F401  (imported for registration)
    alibi,
    cem_attention,
    cem_mlp,
    llama_attention,
    norm,
    preconditioner,
    rope,
    swiglu,
)
