"""The resumable sampler: order is a pure function of (seed, position)."""

from cem_ablate.data.sampler import ShardSampler, StreamBatchSampler


def batches(n=50, b=4, seed=1, start=0, end=30, rank=0, world=1):
    return list(StreamBatchSampler(n, b, seed, end, start=lambda: start, rank=rank, world_size=world))


def test_resumed_sampler_continues_the_uninterrupted_order():
    full = batches(start=0, end=30)
    assert batches(start=12, end=30) == full[12:]
    position = [0]
    sampler = StreamBatchSampler(50, 4, 1, 30, start=lambda: position[0])
    position[0] = 7  # the run advanced before iteration began (a restored checkpoint)
    assert list(sampler) == full[7:]
    assert len(sampler) == 30  # always the whole run: Lightning counts across a resume


def test_every_epoch_is_a_permutation_and_epochs_differ():
    flat = [i for batch in batches(n=20, b=4, end=10) for i in batch]
    first, second = flat[:20], flat[20:40]
    assert sorted(first) == list(range(20)) == sorted(second)
    assert first != second


def test_ranks_split_each_global_batch_without_overlap():
    one = batches(b=8, world=1)
    r0, r1 = batches(b=4, rank=0, world=2), batches(b=4, rank=1, world=2)
    for m in range(len(one)):
        assert r0[m] + r1[m] == one[m]  # same global batch for the same world x batch size


def test_shard_sampler_covers_the_split_once():
    shards = [list(ShardSampler(11, r, 3)) for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(11))
