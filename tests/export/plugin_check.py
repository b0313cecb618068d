"""Run in a fresh interpreter (`python -I`) by tests/export/test_plugin_export.py: with
cem_ablate, components and the plugin's modules made unimportable, load an exported
folder with transformers alone, and report its logits, its greedy generations (cached
and not); what it logs goes to stderr.

    python -I plugin_check.py FOLDER INPUTS.pt OUT.json BLOCKED_NAME...
"""

import importlib.abc
import json
import sys

BLOCKED = set(sys.argv[4:])


class Unimportable(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, Unimportable())

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

folder, inputs, out_file = sys.argv[1:4]
importable = []
for name in sorted(BLOCKED):
    try:
        __import__(name)
        importable.append(name)
    except ImportError:
        pass

model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True, dtype=torch.float32).eval()
ref = torch.load(inputs)
with torch.no_grad():
    logits = model(ref["ids"]).logits
greedy = {}
for use_cache in (True, False, True):  # the cached call twice: the warning comes once
    tokens = model.generate(
        ref["prompt"],
        max_new_tokens=5,
        do_sample=False,
        use_cache=use_cache,
        attention_mask=torch.ones_like(ref["prompt"]),
    )
    greedy[str(use_cache)] = tokens[0].tolist()
torch.save(logits, out_file + ".logits.pt")
json.dump(
    {
        "class": type(model).__name__,
        "greedy": greedy,
        "importable": importable,
        "loaded": sorted(n for n in sys.modules if n.split(".")[0] in BLOCKED),
    },
    open(out_file, "w"),
)
