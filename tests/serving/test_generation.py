"""Sampling with the decoding cache: greedy equals greedy by full recomputation; sampling
is seeded, top-k 1 is greedy, top-p keeps the smallest set reaching p."""

from __future__ import annotations

import torch

from cem_ablate.model.decoding import DecodingCache
from cem_ablate.serving.generation import Sampling, generate, next_token
from tests.model.test_decoding import VARIANTS, random_model, token_ids


def greedy_by_recomputation(model, prompt, n):
    ids = prompt
    for _ in range(n):
        ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[:, prompt.shape[1] :]


def test_greedy_generation_equals_greedy_decoding_by_full_recomputation():
    for name in ("llama", "full_cem_T4", "parallel_energy", "nesterov_stream_rms"):
        model = random_model(VARIANTS[name]).float()
        prompt = token_ids(seq=5)
        with torch.no_grad():
            expected = greedy_by_recomputation(model, prompt, 12)
        got = torch.stack(list(generate(model, prompt, Sampling(max_new_tokens=12))), dim=1)
        assert torch.equal(got, expected), name
        assert len(set(got.flatten().tolist())) > 1  # not a constant sequence


def test_sampling_is_seeded_and_the_recompute_cache_gives_the_same_tokens():
    model = random_model(VARIANTS["reuse"]).float()
    prompt = token_ids(seq=4)
    sampling = Sampling(max_new_tokens=10, temperature=1.0, top_p=0.9, seed=7)
    first = torch.stack(list(generate(model, prompt, sampling)), 1)
    again = torch.stack(list(generate(model, prompt, sampling)), 1)
    recomputed = torch.stack(list(generate(model, prompt, sampling, cache=DecodingCache(recompute=True))), 1)
    other = torch.stack(list(generate(model, prompt, Sampling(10, 1.0, None, 0.9, seed=8))), 1)
    assert torch.equal(first, again) and torch.equal(first, recomputed)
    assert not torch.equal(first, other)


def test_stops_when_every_sequence_has_produced_eos():
    model = random_model(VARIANTS["llama"]).float()
    prompt = token_ids(batch=1, seq=4)
    greedy = [int(t) for t in generate(model, prompt, Sampling(max_new_tokens=6))]
    stopped = [int(t) for t in generate(model, prompt, Sampling(max_new_tokens=6), eos_id=greedy[2])]
    assert stopped == greedy[: greedy.index(greedy[2]) + 1]


def test_top_k_and_top_p_keep_the_tokens_they_say():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    draws = lambda s: {int(next_token(logits, s, gen)) for _ in range(300)}  # noqa: E731
    assert draws(Sampling(temperature=1.0, top_k=1)) == {0}
    assert draws(Sampling(temperature=1.0, top_k=2)) == {0, 1}
    assert draws(Sampling(temperature=1.0, top_p=0.8)) == {0, 1}  # 0.5 + 0.3 reaches 0.8
    assert draws(Sampling(temperature=1.0, top_p=0.81)) == {0, 1, 2}
    assert draws(Sampling(temperature=1.0)) == {0, 1, 2, 3}
