"""Learning-rate schedule of the paper (docs/design/experiments.md#s7-training-recipe): linear warmup, cosine to a floor."""

from __future__ import annotations

import math


def warmup_cosine(step: int, total_steps: int, warmup_steps: int, final_frac: float) -> float:
    """Multiplier of the peak lr for optimizer step `step` (0-based).

    Warmup rises linearly to 1 over `warmup_steps` (the first step already gets
    1/warmup, never 0), then a half cosine falls to `final_frac` at the last step.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return final_frac + (1.0 - final_frac) * 0.5 * (1.0 + math.cos(math.pi * progress))
