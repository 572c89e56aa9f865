"""torch.utils.data.sampler's path to mpigrad's samplers."""
from mpigrad.data import (BatchSampler, RandomSampler, Sampler, SequentialSampler,  # noqa: F401
                          SubsetRandomSampler, WeightedRandomSampler)
