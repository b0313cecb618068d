"""Run in a fresh interpreter (`python -I`) by tests/export: load each exported folder with
transformers alone and report its logits and greedy generations. Never imports cem_ablate.

    python -I hf_check.py CASES.json OUT.json
CASES.json: [{"dir": ..., "inputs": "ref.pt"}], where ref.pt holds `ids` (B, J) and `prompt` (1, P).
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM

cases, out_file = json.load(open(sys.argv[1])), sys.argv[2]
results = []
for case in cases:
    model = AutoModelForCausalLM.from_pretrained(case["dir"], trust_remote_code=True, dtype=torch.float32).eval()
    ref = torch.load(case["inputs"])
    with torch.no_grad():
        logits = model(ref["ids"]).logits
    greedy = {}
    for use_cache in (True, False):
        tokens = model.generate(
            ref["prompt"],
            max_new_tokens=case.get("new_tokens", 6),
            do_sample=False,
            use_cache=use_cache,
            attention_mask=torch.ones_like(ref["prompt"]),
        )
        greedy[str(use_cache)] = tokens[0].tolist()
        beams = model.generate(
            ref["prompt"],
            max_new_tokens=4,
            do_sample=False,
            num_beams=3,
            num_return_sequences=3,
            use_cache=use_cache,
            attention_mask=torch.ones_like(ref["prompt"]),
        )
        greedy[f"beams_{use_cache}"] = beams.tolist()
    with torch.no_grad():  # what a cached step keeps: the platform's decoding state, not the prefix to recompute
        cache = getattr(model(ref["prompt"], use_cache=True), "cache", None)
        cache = cache if cache is not None else model(ref["prompt"], use_cache=True).past_key_values
    state = getattr(cache, "_cem_decoding", (None,))[0]
    incremental = state is not None and not state.recompute and state.position == ref["prompt"].shape[1]
    torch.save(logits, case["dir"] + ".logits.pt")
    results.append({"dir": case["dir"], "class": type(model).__name__, "greedy": greedy, "incremental": incremental})
platform = sorted(name for name in sys.modules if name.split(".")[0] in ("cem_ablate", "components"))
json.dump({"results": results, "platform_modules": platform}, open(out_file, "w"))
