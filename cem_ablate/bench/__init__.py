"""`cem-ablate bench`: training-step throughput, FLOP/s, MFU and peak memory of variants.

    config.py        BenchConfig: what to measure (validated once, from CLI flags)
    variants.py      variant names (llama, hf_llama, cem_attn_t2_ckpt, ...) -> model configs
    train_step.py    one training step: forward, head + loss (training.head_loss), backward, clip, AdamW
    train_parity.py  `cem-ablate train` tokens/s next to the bench step's, same config (training = bench)
    measure.py       interleaved timing and per-step peak memory
    runner.py        builds every case, runs them side by side, collects rows
    results.py       rows, ratios, CPU and GPU targets, table, JSON and markdown
    cpu_allocator.py glibc malloc tuning (large tensors without page faults)
    compile_cache.py a persistent inductor cache shared by runs and trials

This package imports nothing heavy at import time; the CLI imports it inside `run`.
"""
