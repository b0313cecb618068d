"""Two tiny lm-evaluation-harness tasks on local JSON files (offline): multiple choice
(log-likelihood of each choice) and perplexity (rolling log-likelihood of each text)."""

import json
from pathlib import Path

MC_DOCS = [
    {"question": "def f(x):\n    return", "choices": ["x", "None", "1 + 1"], "answer": 0},
    {"question": "import", "choices": ["os", "sys", "foo bar"], "answer": 1},
    {"question": "for i in", "choices": ["range(10):", "list", "x"], "answer": 0},
]
PPL_DOCS = [{"text": "def main():\n    return 0\n"}, {"text": "import os\nprint(os.getcwd())"}]


def write_tasks(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, docs in (("mc", MC_DOCS), ("ppl", PPL_DOCS)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "cem_mc.yaml").write_text(f"""task: cem_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder / "mc.jsonl"}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
""")
    (folder / "cem_ppl.yaml").write_text(f"""task: cem_ppl
dataset_path: json
dataset_kwargs:
  data_files:
    test: {folder / "ppl.jsonl"}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
  - metric: byte_perplexity
  - metric: bits_per_byte
""")
    return folder
