"""The coordinate check with one muP class's exponents replaced: the check's power against a
wrong parametrization (docs/results/coordinate-check.md).

    python scripts/coord_check_wrong_rule.py CLASS INIT_EXPONENT LR_EXPONENT -- coord-check ARGS...

CLASS is a `ParamClass` value (hidden, readout, vector, low_rank_factor, sqrt_width_vector,
embedding); INIT_EXPONENT is the exponent of m on its standard init (or `zero`), LR_EXPONENT on
its Adam lr (cem_ablate/model/parametrization.py MUP_RULES, the one owner, replaced in this
process only). Example, the hidden matrices' lr at m^-1/2 instead of m^-1:

    python scripts/coord_check_wrong_rule.py hidden -0.5 -0.5 -- coord-check studies/transfer.yaml \\
        --variant cem_attention_T1 --out reports/coord_check_wrong_hidden_lr
"""

from __future__ import annotations

import sys

from cem_ablate.cli.main import main
from cem_ablate.model import parametrization


def run(argv: list[str]) -> int:
    if len(argv) < 4 or argv[3] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    cls = parametrization.parse_class(argv[0], "CLASS")
    init = None if argv[1] == "zero" else float(argv[1])
    parametrization.MUP_RULES[cls] = (init, float(argv[2]))
    print(f"muP rule replaced for this run: {cls.value}: init x m^{argv[1]}, lr x m^{argv[2]}", flush=True)
    return main(argv[4:])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
