"""DistributedSampler: each rank's share of a dataset for data-parallel training."""
import numpy as np

from ._checks import check_bool, check_int
from .sampler import Sampler, epoch_rng


class DistributedSampler(Sampler):
    """The indices one of `num_replicas` ranks visits in an epoch.

    Every rank builds the same order: a permutation for `(seed, epoch)`
    when `shuffle` is true, `0..N-1` otherwise. The order is padded by
    repeating it from the start up to a multiple of `num_replicas` (or,
    with `drop_last`, cut down to one), and rank `r` takes positions
    `r, r + num_replicas, ...`. So every rank gets `len(self)` indices,
    `ceil(N / num_replicas)` or, with `drop_last`, `floor(N / num_replicas)`,
    and the same number of batches; the ranks' shares are disjoint apart from
    the padding.

    `num_replicas` and `rank` default to the world size and rank of the
    `mpigrad.distributed` process group. Call `set_epoch` at the start of
    every epoch; without it each epoch repeats the same order.
    """

    def __init__(
        self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False
    ):
        if num_replicas is None or rank is None:
            # Not at the top: importing mpigrad.distributed initialises MPI, which a sampler
            # given num_replicas and rank (or mpigrad.data itself) must not do.
            from .. import distributed as dist

            if not dist.is_initialized():
                raise RuntimeError(
                    "DistributedSampler takes num_replicas and rank from the process group, "
                    "which is not initialized: call mpigrad.distributed.init_process_group() "
                    "first, or pass num_replicas= and rank= explicitly"
                )
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        self.num_replicas = check_int("num_replicas", num_replicas, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.num_replicas:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset = dataset
        self.shuffle = check_bool("shuffle", shuffle)
        self.seed = check_int("seed", seed, 0)
        self.drop_last = check_bool("drop_last", drop_last)
        self.epoch = 0

    @property
    def num_samples(self):
        """How many indices each rank gets per epoch."""
        if self.drop_last:
            return len(self.dataset) // self.num_replicas
        return -(-len(self.dataset) // self.num_replicas)

    @property
    def total_size(self):
        return self.num_samples * self.num_replicas

    def set_epoch(self, epoch):
        """Use the order of `epoch` in the next passes (all ranks must agree)."""
        self.epoch = check_int("epoch", epoch, 0)

    def __iter__(self):
        n = len(self.dataset)
        order = epoch_rng(self.seed, self.epoch).permutation(n) if self.shuffle else np.arange(n)
        # np.resize cuts an array short or fills it with repeated copies of
        # itself from the start: exactly the drop_last cut and the padding.
        order = np.resize(order, self.total_size)
        return iter(order[self.rank :: self.num_replicas].tolist())

    def __len__(self):
        return self.num_samples
