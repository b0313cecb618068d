"""`cem-ablate bench --decode` at a tiny size (timings here are not results): every
variant gets its row with each metric and its ratio to Llama; CEM attention's cache is
0.50x Llama's; bad input is one `error:` line."""

from __future__ import annotations

import json
import math

from cem_ablate.bench.decode import DecodeBenchConfig, ratios, run_decode_bench, table
from cem_ablate.cli.main import main
from cem_ablate.config.schema import parse

TINY = {
    "sizes": ["tiny"],
    "context": 8,
    "new_tokens": 2,
    "batch_sizes": [1, 3],
    "vocab_size": 64,
    "repeats": 2,
    "variants": [
        "llama",
        "cem_attn_t1",
        "cem_attn_t4_nodiag",
        "cem_full_t2",
        "reuse={attention: {name: cem, steps: 2, depth_mode: reuse}}",
        "et_parallel_t2",
    ],
}


def test_every_variant_gets_each_metric_and_its_ratio_to_llama():
    cfg = parse(DecodeBenchConfig, TINY, "bench")
    rows, meta = run_decode_bench(cfg, log=lambda line: None)
    assert [r.variant for r in rows] == [
        "llama",
        "cem_attn_t1",
        "cem_attn_t4_nodiag",
        "cem_full_t2",
        "reuse",
        "et_parallel_t2",
    ]
    q = ratios(rows)
    for r in rows:
        assert r.error is None and not r.recomputes
        assert len(r.prefill_s) == 2 and set(r.decode_s) == {"1", "3"} and all(t > 0 for t in r.prefill_s)
        assert r.peak_bytes is None or r.peak_bytes > 0
        entry = q[("tiny", r.variant)]
        assert set(entry) == {"params", "cache", "prefill", "peak", "decode_b1", "decode_b3"}
        assert all(math.isfinite(v) and v > 0 for k, v in entry.items() if k != "peak")
    d, layers = 64, 2  # the tiny preset
    assert rows[0].cache_bytes_per_token == 2 * layers * d * 4  # K and V, float32
    assert [
        q[("tiny", v)]["cache"] for v in ("cem_attn_t1", "cem_attn_t4_nodiag", "cem_full_t2", "et_parallel_t2")
    ] == [0.5] * 4
    assert q[("tiny", "reuse")]["cache"] == 1.0  # two applications, one D-wide tensor each
    text = table(rows, meta["config"])
    line = next(line for line in text.splitlines() if line.startswith("| cem_attn_t1 |"))
    assert line.split(" | ")[2] == "512 (0.50x)" and "decode tok/s b3" in text


def test_the_command_writes_json_and_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "decode.json"
    args = [
        "bench",
        "--decode",
        "--sizes",
        "tiny",
        "--context",
        "6",
        "--new-tokens",
        "1",
        "--batch-sizes",
        "1",
        "--repeats",
        "1",
        "--vocab-size",
        "32",
        "--variants",
        "llama",
        "cem_attn_t2",
        "--json",
        str(out),
    ]
    assert main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["llama", "cem_attn_t2"] and rows[1]["ratio_vs_llama"]["cache"] == 0.5
    capsys.readouterr()
    assert main(["bench", "--decode", "--variants", "llama", "hf_llama"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: bench.variants") and err.count("\n") == 1
    assert main(["bench", "--decode", "--context", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: bench.context")
