"""The identity hash: a short digest of a JSON-able value, the one way cem-ablate names
things by their content (variant and trial keys, study hashes, store-specific
attribute names). `RunConfig.variant_key()` and `RunConfig.trial_key()` decide *what*
is hashed (the trial key includes the code fingerprint, `config/fingerprint.py`); this
module only decides *how*.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

KEY_CHARS = 10  # 40 bits: collisions need ~1e6 keys in one store


def digest(value: Any, chars: int = KEY_CHARS) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:chars]
