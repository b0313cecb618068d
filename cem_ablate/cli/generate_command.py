"""`cem-ablate generate RUN_DIR|CHECKPOINT --prompt TEXT`: sample text from a trained run.

The run's own tokenizer encodes the prompt; the model decodes with its cache
(model/decoding.py) and the text is printed as it is generated. A model with a
sublayer that has no decoding hook still generates, recomputing the prefix for every
token, after one `warning:` line; a broken hook is one `error:` line.
"""

from __future__ import annotations

import argparse
import sys

HELP_EPILOG = """examples:
  cem-ablate generate runs/tiny-1a2b3c --prompt "def main(" --max-new-tokens 200
  cem-ablate generate runs/tiny-1a2b3c/checkpoints/last.ckpt --prompt "import " --temperature 0.8 --top-p 0.95 --seed 1
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = HELP_EPILOG
    parser.add_argument("target", help="a run folder (its checkpoints/last.ckpt) or a checkpoint file in one")
    parser.add_argument("--prompt", required=True, help="the text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (default: 64)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy; > 0: sample")
    parser.add_argument("--top-k", type=int, help="sample from the k most likely tokens only")
    parser.add_argument("--top-p", type=float, help="sample from the smallest set of tokens with probability >= p")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--stop-at-eos", action="store_true", help="stop at the tokenizer's end-of-document id")
    parser.add_argument(
        "--recompute",
        action="store_true",
        help="no cache: recompute the whole prefix for every token (the reference the cache must equal)",
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from cem_ablate.config import ConfigError
    from cem_ablate.model.decoding import DecodingCache, missing_hooks, new_cache
    from cem_ablate.model.transformer import CEMTransformer
    from cem_ablate.serving.generation import Sampling, generate
    from cem_ablate.training.trained_run import load_trained_run

    sampling = Sampling(args.max_new_tokens, args.temperature, args.top_k, args.top_p, args.seed)
    sampling.validate()
    trained = load_trained_run(args.target)  # its warnings on stderr, one line each
    if trained.tokenizer is None:
        raise ConfigError(
            "data.task", f"{trained.config.data.task!r} runs have no text tokenizer; generate needs a text run."
        )
    model, tokenizer = trained.model.to(args.device), trained.tokenizer
    assert isinstance(model, CEMTransformer)  # load_trained_run builds one (TrainedRun types it nn.Module)
    missing = missing_hooks(model)
    if missing and not args.recompute:
        print(
            f"warning: {'; '.join(missing)} (model/protocol.py IncrementalDecoding): generating by "
            "recomputing the whole prefix for every token",
            file=sys.stderr,
        )
    prompt = tokenizer.encode_batch([args.prompt])[0].tolist()
    if not prompt:
        raise ConfigError("--prompt", "encodes to no tokens; give some text.")
    limit = model.dims.max_seq_len
    if len(prompt) + sampling.max_new_tokens > limit:
        raise ConfigError(
            "--max-new-tokens",
            f"the prompt's {len(prompt)} tokens + {sampling.max_new_tokens} new "
            f"exceed the model's max_seq_len {limit}.",
        )
    cache = DecodingCache(recompute=True) if args.recompute else new_cache(model)
    ids = torch.tensor([prompt], device=args.device)
    eos = tokenizer.eos_id if args.stop_at_eos else None
    stream = TextStream(tokenizer)
    for token in generate(model, ids, sampling, eos, cache):
        sys.stdout.write(stream.push(int(token[0])))
        sys.stdout.flush()
    sys.stdout.write(stream.flush() + "\n")
    return 0


class TextStream:
    """The text of the tokens so far, handed out as it grows; a trailing incomplete
    UTF-8 character (a byte tokenizer's partial code point) waits for its next bytes."""

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.shown = tokenizer, [], 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        out, self.shown = text[self.shown :], len(text)
        return out

    def flush(self) -> str:
        text = self.tokenizer.decode(self.ids)
        out, self.shown = text[self.shown :], len(text)
        return out
