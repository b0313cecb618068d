"""Digest of the training forward and backward of every decoding-test variant.

    python scripts/forward_digest.py            # in this tree
    (cd OTHER_TREE && PYTHONPATH=$PWD python /path/to/scripts/forward_digest.py)

Two trees print the same digest when their models give bit-identical logits and
gradients (float32 and float64, seed 0) for every variant of
tests/model/test_decoding.py: how it was checked that adding the decoding hooks left
the training path unchanged (config/fingerprint.py digests these files, so results
trained before stay valid only if it is). The variants are read from that test file's
text, so a tree without the decoding module can run it too.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

from cem_ablate import build_model

TEST = Path(__file__).resolve().parents[1] / "tests" / "model" / "test_decoding.py"


def main() -> None:
    src = TEST.read_text()
    namespace: dict = {}
    exec(src[src.index("DIMS =") : src.index("def random_model")], namespace)  # DIMS, VARIANTS only
    dims, variants = namespace["DIMS"], namespace["VARIANTS"]
    out = hashlib.sha256()
    ids = torch.randint(0, dims["vocab_size"], (2, 11), generator=torch.Generator().manual_seed(0))
    for config in variants.values():
        for dtype in (torch.float32, torch.float64):
            torch.manual_seed(0)
            model = build_model({**dims, **config}).to(dtype)
            logits = model(ids)
            logits.square().mean().backward()
            out.update(logits.detach().numpy().tobytes())
            for _, p in model.named_parameters():
                out.update(p.grad.numpy().tobytes() if p.grad is not None else b"none")
    print(f"{len(variants)} variants: {out.hexdigest()}  ({sys.modules['cem_ablate'].__file__})")


if __name__ == "__main__":
    main()
