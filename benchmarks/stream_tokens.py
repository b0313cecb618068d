"""Streamed data: tokenizing throughput per core, and the cost of resuming.

    python benchmarks/stream_tokens.py --json benchmarks/results/stream_tokens.json \
        --markdown benchmarks/results/stream_tokens.md

Corpus: the Python standard library's sources as a local jsonl file, read through
`datasets` with `streaming=True` (what a SlimPajama run reads, minus the network).

1. Tokens/s of the tokenizing pipeline on one core (RAYON_NUM_THREADS=1), byte and
   bpe:4096 (trained here on the corpus; the Llama tokenizer is measured only when a
   copy is in the local Hugging Face cache: this machine is offline):
   - before: the earlier `StreamedBlocks`, one `encode_batch` call per document,
     re-done by every rank;
   - after: `build_stream_cache`, batched pieces of 256 documents into the token cache,
     1/W of the documents per rank (a 2-rank gloo run is timed too).
2. Time to the first training batch when a run resumes at 10% and at 90% of its budget:
   before, the stream is re-read and re-tokenized up to the resume point; after, the
   cache is mapped and the sampler starts at the step.

The host is shared: /proc/loadavg is recorded before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # tokenizers' thread pool: one core
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

BLOCK, BATCH = 512, 8


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def write_corpus(folder: Path, max_mb: float) -> Path:
    from cem_ablate.data.sources import stdlib_files, stdlib_root

    root, out, size = stdlib_root(), folder / "corpus.jsonl", 0
    with open(out, "w") as f:
        for rel in stdlib_files(root):
            text = (root / rel).read_text(encoding="utf-8", errors="replace")
            f.write(json.dumps({"text": text}) + "\n")
            size += len(text.encode())
            if size > max_mb * 2**20:
                break
    return out


def open_stream(corpus: Path):
    import datasets

    return datasets.load_dataset("json", data_files=str(corpus), split="train", streaming=True)


def tokenizers(corpus: Path, cache: Path) -> dict[str, object]:
    from cem_ablate.data.tokenizer import load_tokenizer

    def texts() -> Iterator[str]:
        return (row["text"] for row in open_stream(corpus))

    out = {spec: load_tokenizer(spec, cache, "bench-corpus", texts) for spec in ("byte", "bpe:4096")}
    try:
        out["llama"] = load_tokenizer("hf-internal-testing/llama-tokenizer", cache, "bench-corpus", texts)
    except Exception as err:  # noqa: BLE001 - offline: say so in the results
        print(f"llama tokenizer not measured: {str(err).splitlines()[0][:120]}", file=sys.stderr)
    return out


# -- before: cem_ablate/data/streaming.py as of commit 8fa9c8b (less its empty-stream check) --
class LegacyStreamedBlocks(torch.utils.data.IterableDataset):
    def __init__(
        self,
        ds,
        tokenizer,
        block_size,
        batch_size,
        seed,
        end_batch,
        start: Callable[[], int] = lambda: 0,
        rank=0,
        world_size=1,
    ):
        self.ds, self.tokenizer, self.block_size, self.batch_size = ds, tokenizer, block_size, batch_size
        self.seed, self.start, self.end_batch, self.rank, self.world_size = seed, start, end_batch, rank, world_size

    def _blocks(self):
        B = self.block_size
        pass_index = 0
        while True:
            stream = self.ds.shuffle(seed=self.seed, buffer_size=10_000)
            stream.set_epoch(pass_index)
            buffer = np.empty(0, dtype=np.int64)
            for row in stream:
                (ids,) = self.tokenizer.encode_batch([row["text"]])
                buffer = np.concatenate([buffer, ids.astype(np.int64), [self.tokenizer.eos_id]])
                while len(buffer) >= B + 1:
                    yield buffer[: B + 1]
                    buffer = buffer[B:]
            pass_index += 1

    def __iter__(self):
        per_batch = self.batch_size * self.world_size
        start = self.start()
        for k, block in enumerate(self._blocks()):
            m, within = divmod(k, per_batch)
            if m >= self.end_batch:
                return
            if m >= start and within // self.batch_size == self.rank:
                chunk = torch.from_numpy(block)
                yield chunk[:-1], chunk[1:]


def legacy_tokens_per_s(corpus: Path, tok) -> tuple[float, int]:
    """The old per-document loop over the whole stream (no shuffle buffer cost counted)."""
    start, n = time.perf_counter(), 0
    for row in open_stream(corpus):
        (ids,) = tok.encode_batch([row["text"]])
        n += len(ids) + 1
    return n / (time.perf_counter() - start), n


def cache_tokens_per_s(corpus: Path, tok, cache: Path) -> tuple[float, int]:
    from cem_ablate.data.streaming import build_stream_cache

    start = time.perf_counter()
    built = build_stream_cache(open_stream(corpus), tok, cache, f"bench-{time.time_ns()}", 10**12)
    n = built.meta["tokens"]["train"]
    return n / (time.perf_counter() - start), n


def _rank(rank: int, world: int, port: int, corpus: str, spec: str, cache: str, out: str) -> None:
    import torch.distributed as dist

    from cem_ablate.data.streaming import build_stream_cache, torch_exchange
    from cem_ablate.data.tokenizer import load_tokenizer

    tok = load_tokenizer(spec, Path(cache), "bench-corpus", lambda: iter(()))
    next(iter(open_stream(Path(corpus))))  # datasets' lazy imports happen outside the timing
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    dist.barrier()
    start = time.perf_counter()
    built = build_stream_cache(
        open_stream(Path(corpus)),
        tok,
        Path(cache) / f"r{rank}",
        "bench-2ranks",
        10**12,
        rank=rank,
        world_size=world,
        exchange=torch_exchange(),
    )
    seconds = time.perf_counter() - start
    if rank == 0:
        Path(out).write_text(json.dumps({"tokens": built.meta["tokens"]["train"], "seconds": seconds}))
    dist.destroy_process_group()


def two_rank_tokens_per_s(corpus: Path, spec: str, cache: Path) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = cache / f"two-{spec.replace(':', '')}.json"
    torch.multiprocessing.spawn(_rank, args=(2, port, str(corpus), spec, str(cache), str(out)), nprocs=2)
    data = json.loads(out.read_text())
    return data["tokens"] / data["seconds"]


def resume_seconds(corpus: Path, tok, cache: Path, fraction: float, n_tokens: int) -> dict[str, float]:
    """Seconds to the first training batch of a run resumed at `fraction` of its budget."""
    from cem_ablate.data.packing import PackedBlocks
    from cem_ablate.data.sampler import StreamBatchSampler
    from cem_ablate.data.streaming import build_stream_cache

    end = (n_tokens - 1) // (BLOCK * BATCH)
    at = int(fraction * end)
    t0 = time.perf_counter()
    next(iter(LegacyStreamedBlocks(open_stream(corpus), tok, BLOCK, BATCH, 0, end, start=lambda: at)))
    before = time.perf_counter() - t0
    build_stream_cache(open_stream(corpus), tok, cache, "bench-resume", n_tokens)  # the first session built it
    t0 = time.perf_counter()
    built = build_stream_cache(open_stream(corpus), tok, cache, "bench-resume", n_tokens)
    blocks = PackedBlocks(built.tokens("train"), BLOCK)
    loader = torch.utils.data.DataLoader(
        blocks, batch_sampler=StreamBatchSampler(len(blocks), BATCH, 0, end, start=lambda: at)
    )
    next(iter(loader))
    after = time.perf_counter() - t0
    return {"step": at, "of": end, "before_s": before, "after_s": after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus-mb", type=float, default=8.0, help="size of the streamed corpus (default 8 MB)")
    parser.add_argument("--json", default="benchmarks/results/stream_tokens.json")
    parser.add_argument("--markdown", default="benchmarks/results/stream_tokens.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {
        "host": {
            "loadavg_start": loadavg(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "throughput": {},
        "resume": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = write_corpus(tmp, args.corpus_mb)
        toks = tokenizers(corpus, tmp / "cache")
        for name, tok in toks.items():
            before, n = legacy_tokens_per_s(corpus, tok)
            after, _ = cache_tokens_per_s(corpus, tok, tmp / "cache")
            two = two_rank_tokens_per_s(corpus, tok.spec, tmp / "cache") if name != "llama" else None
            results["throughput"][name] = {
                "tokens": n,
                "before_per_core": before,
                "after_per_core": after,
                "after_2_ranks_total": two,
            }
            print(name, results["throughput"][name], flush=True)
        n_tokens = results["throughput"]["bpe:4096"]["tokens"]
        for fraction in (0.1, 0.9):
            results["resume"][f"{fraction:.0%}"] = resume_seconds(
                corpus, toks["bpe:4096"], tmp / "cache", fraction, n_tokens
            )
            print(fraction, results["resume"][f"{fraction:.0%}"], flush=True)
    results["host"]["loadavg_end"] = loadavg()
    Path(args.json).write_text(json.dumps(results, indent=2))
    Path(args.markdown).write_text(render(results))
    print(render(results))
    return 0


def render(r: dict) -> str:
    lines = [
        "| tokenizer | tokens | before, tokens/s (1 core) | after, tokens/s (1 core) | after, 2 ranks (total) |",
        "|---|---|---|---|---|",
    ]
    for name, t in r["throughput"].items():
        two = f"{t['after_2_ranks_total']:,.0f}" if t["after_2_ranks_total"] else "-"
        lines.append(f"| {name} | {t['tokens']:,} | {t['before_per_core']:,.0f} | {t['after_per_core']:,.0f} | {two} |")
    lines += ["", "| resume at | step | before: s to first batch | after: s to first batch |", "|---|---|---|---|"]
    for at, x in r["resume"].items():
        lines.append(f"| {at} | {x['step']} / {x['of']} | {x['before_s']:.2f} | {x['after_s']:.3f} |")
    lines += [
        "",
        f"load average (1, 5, 15 min): {r['host']['loadavg_start']} at the start, "
        f"{r['host']['loadavg_end']} at the end; {r['host']['cpus']} CPUs.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
