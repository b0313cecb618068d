"""One persistent inductor cache for every `torch.compile` of the project.

A cold compile of a CEM model is slow on a 2-core CPU and several times faster with a
warm inductor cache (measured: see the lab notes). Trials of a study build the same graphs again and again,
so they should share one on-disk cache: call `configure_inductor_cache()` once per
process before compiling (subprocesses inherit it through the environment). The
default location is `<cache root>/inductor`, the cache root being $CEM_ABLATE_CACHE
or ~/.cache/cem-ablate; an explicit TORCHINDUCTOR_CACHE_DIR set by the user wins.
"""

from __future__ import annotations

import os
from pathlib import Path

from cem_ablate.data.config import cache_root


def configure_inductor_cache(cache_dir: str | Path | None = None) -> Path:
    """Point inductor's FX-graph and AOT-autograd caches at a shared directory; returns it."""
    if cache_dir is not None:
        path = Path(cache_dir).expanduser()
    elif os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        path = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    else:
        path = cache_root() / "inductor"
    path.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path.resolve())
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True  # the defaults today; set so a changed default cannot undo reuse
    functorch_config.enable_autograd_cache = True
    return path
