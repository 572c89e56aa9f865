"""How a DistributedDataParallel model's default reduction sums on this rank: what
jobs/bench/bench_link.py reports beside its times and what tests/jobs/test_cluster.py checks
on the simulated cluster. It reads the reducer's internals, which only the package
otherwise knows."""
from mpi4py import MPI


def reduction(ddp):
    """A dict describing how DDP model `ddp` sums its gradients on this rank:

    - "shared": how many ranks share its buckets in their host's memory (0: none do),
    - "hierarchical": whether it sums in MPI rounds through its host's first rank,
    - "across_hosts": how many hosts the ranks it sums with across hosts are on (0: this rank
      sends nothing across hosts itself, e.g. a host's other ranks in the MPI rounds),
    - "ring_across_hosts": whether that sum across hosts goes round mpigrad's ring rather
      than the library's Iallreduce (as forced, or as the ranks timed it).

    Collective over the model's ranks when they share buckets (the owners of each slice
    exchange their host names). Raises ValueError for a model with a registered comm hook,
    whose reduction is the hook's."""
    reducer = ddp.reducer
    if reducer._hook_registered:
        raise ValueError("the model has a registered comm hook: it reduces as the hook does, "
                         "not by DDP's default reduction")
    shared = reducer.shared
    if shared is not None:
        hosts = 0 if shared.across is None else \
            len(set(shared.across.allgather(MPI.Get_processor_name())))
        return {"shared": shared.size, "hierarchical": False, "across_hosts": hosts,
                "ring_across_hosts": bool(shared.ring_across_hosts)}
    hierarchy = reducer._comm_hook[0].hierarchy
    several_hosts = len(hierarchy.host_sizes) > 1
    if hierarchy.spans_shared_hosts:
        # Only each host's first rank is in the communicator that crosses hosts.
        crosses = hierarchy.across != MPI.COMM_NULL
    else:
        crosses = several_hosts  # one rank per host: every rank sums across hosts
    return {"shared": 0, "hierarchical": hierarchy.spans_shared_hosts,
            "across_hosts": len(set(hierarchy.host_names)) if crosses else 0,
            "ring_across_hosts": bool(hierarchy.ring_across_hosts)}
