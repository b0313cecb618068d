"""The summary at the top of `scripts/gpu_check.sh`'s report: the answers first.

    python -m cem_ablate.bench.check_summary WORK_DIR

Reads what the check's parts left in WORK_DIR (`bench-86M.json`, `parity.json`,
`bench-162M.json`) and prints a markdown block: every GPU target with its measured value
and verdict, and training vs bench. A part that left nothing is named as missing, so a
cut-short check still says what it did not measure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cem_ablate.bench.train_parity import PARITY_TARGET


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _verdict(target: dict[str, Any]) -> str:
    if target.get("measured") is None:
        return "not measured (a case of the ratio is missing)"
    if target.get("within_noise"):
        return "within noise"
    return "met" if target.get("met") else "missed"


def _bench_lines(name: str, payload: dict[str, Any] | None) -> list[str]:
    if payload is None:
        return [f"- {name}: no results (the part failed or was cut short: see the parts table and logs.txt)"]
    lines = []
    errors = [r for r in payload.get("rows", []) if r.get("error")]
    for t in payload.get("targets", []):
        interval = ""
        if t.get("low") is not None and t.get("high") is not None:
            interval = f" [{t['low']:.3g}, {t['high']:.3g}]"
        sense = ">=" if t.get("higher_is_better", True) else "<="
        measured = "not measured" if t.get("measured") is None else f"{t['measured']:.3g}"
        lines.append(
            f"- {name}: {t['name']}: {measured}{interval} (target {sense} {t['threshold']:.3g}): {_verdict(t)}"
        )
    lines += [f"- {name}: {r['variant']} {r['mode']} failed: {r['error']}" for r in errors]
    return lines or [f"- {name}: no targets evaluated"]


def summary(work: Path) -> str:
    lines = ["## Summary", ""]
    parity = _load(work / "parity.json")
    if parity is None:
        lines.append("- train vs bench: no result (the part failed or was cut short: see logs.txt)")
    else:
        ratio = parity.get("ratio")
        verdict = "met" if ratio is not None and ratio >= PARITY_TARGET else "missed"
        lines.append(
            f"- train vs bench ({parity['size']} {parity['variant']} {parity['mode']} {parity['precision']}, "
            f"{parity['device']}): `cem-ablate train` {parity['train_tokens_per_sec']:,.0f} tokens/s "
            f"(MFU {parity['train_mfu']:.1%}) / bench {parity['bench_tokens_per_sec']:,.0f} = "
            f"{ratio:.3f} (target >= {PARITY_TARGET}): {verdict}"
        )
        if parity.get("train_profile"):
            lines.append(f"- `cem-ablate train`'s {parity['train_profile']}")
    for name in ("bench-86M", "bench-162M"):
        lines += _bench_lines(name, _load(work / f"{name}.json"))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m cem_ablate.bench.check_summary WORK_DIR", file=sys.stderr)
        return 2
    print(summary(Path(args[0])), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
