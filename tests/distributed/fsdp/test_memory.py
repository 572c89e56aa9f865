"""Memory per rank (tracemalloc): a sharded GPT keeps 1/N of its parameters, gradients and
AdamW state, and a step's peak exceeds that by about what the unsharded model's step needs
besides its own state (activations, the optimizer's scratch) plus a few units' full
parameters and gradients (the unit computing, the one prefetched, one reduction in flight),
never the whole model. docs/fsdp.md has the measured table."""
from ._memory import measure

UNITS_IN_FLIGHT = 6  # slack over the 4-5 full units a step holds at once at most


def test_state_is_one_nth_and_the_peak_a_few_units_above_it(rank, size):
    plain_peak, plain_kept, unit, total, tensors = measure(sharded=False)
    peak, kept, _, _, _ = measure(sharded=True)
    assert plain_kept == 4 * total  # parameters, gradients, exp_avg, exp_avg_sq
    # Each rank's pieces: 1/N of each tensor, rounded up (padding is never stored).
    assert kept <= 4 * (total / size + 8 * tensors)  # rounding: under one float64 each
    overhead = plain_peak - plain_kept
    assert peak <= kept + overhead + UNITS_IN_FLIGHT * unit, (peak, kept, overhead, unit)
    if size > 1:
        assert peak < plain_peak
