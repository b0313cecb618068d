"""What every data module of the platform shares: a resumable training loader.

The training loader starts at the micro-batches already consumed, optimizer steps x
accumulation, read from the trainer when iteration begins (after a checkpoint is
restored; checkpoints are saved at step boundaries), see `cem_ablate.data.sampler`.
Evaluation loaders are sequential and sharded across ranks.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, cast

import lightning as L
from torch.utils.data import DataLoader, Dataset, TensorDataset

from cem_ablate.data.sampler import ShardSampler, StreamBatchSampler


class ResumableDataModule(L.LightningDataModule):
    def __init__(
        self,
        *,
        batch_size: int,
        seed: int,
        total_micro_batches: int,
        accumulation: int = 1,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
    ):
        super().__init__()
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.seed = seed
        self.total_micro_batches = total_micro_batches
        self.accumulation = accumulation
        self.num_workers = num_workers

    def micro_batches_done(self) -> int:
        return self.trainer.global_step * self.accumulation if self.trainer else 0

    def rank_and_world(self) -> tuple[int, int]:
        if self.trainer is None:
            return 0, 1
        return self.trainer.global_rank, self.trainer.world_size

    def train_loader(self, dataset: Dataset) -> DataLoader:
        rank, world = self.rank_and_world()
        sampler = StreamBatchSampler(
            _length(dataset),
            self.batch_size,
            self.seed,
            self.total_micro_batches,
            start=self.micro_batches_done,
            rank=rank,
            world_size=world,
        )
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def eval_loader(self, dataset: Dataset) -> DataLoader:
        rank, world = self.rank_and_world()
        return DataLoader(
            dataset,
            batch_size=self.eval_batch_size,
            sampler=ShardSampler(_length(dataset), rank, world),
            num_workers=self.num_workers,
        )


def _length(dataset: Dataset) -> int:
    # Every dataset here is map-style, sized; torch's Dataset leaves __len__ to subclasses.
    return len(cast(Sized, dataset))


class InMemorySplitsDataModule(ResumableDataModule):
    """A task whose three splits are generated tensors (the synthetic GP and MQAR tasks).

    Subclasses fill `self.splits` ({"train", "validation", "test"} -> TensorDataset)
    in `setup`.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.splits: dict[str, TensorDataset] | None = None

    def split(self, name: str) -> TensorDataset:
        if self.splits is None:
            raise RuntimeError(f"{type(self).__name__}: setup() has not run, no {name} split yet")
        return self.splits[name]

    def train_dataloader(self) -> DataLoader:
        return self.train_loader(self.split("train"))

    def val_dataloader(self) -> DataLoader:
        return self.eval_loader(self.split("validation"))

    def test_dataloader(self) -> DataLoader:
        return self.eval_loader(self.split("test"))
