"""The environment variables through which launchers tell a process its place: the one list.

mpigrad reads them to tell who started a process (an MPI launcher builds the world itself;
torchrun and scripts need the rendezvous), to find the rank on the node, to clear a
launcher's variables before pointing MPI at mpigrad's own PMI server, and to keep them from
DataLoader workers. A leaf module, so that `data` can use it as well as `distributed`.
"""
import os

# Set by an MPI launcher (mpiexec/mpirun of MPICH, Intel MPI or Open MPI, srun with a PMI
# plugin): their presence means MPI builds the world itself.
MPI_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_FD", "PMI_PORT", "PMI_ID", "PMIX_RANK",
                          "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID", "HYDI_CONTROL_FD")
# Where a PMI client would connect by itself; cleared when the rendezvous hands MPI an open,
# authenticated connection instead (PMI_FD, PMI_RANK, PMI_SIZE).
PMI_PORT_VARIABLES = ("PMI_PORT", "PMI_ID")
# The rank among the processes of one node: torchrun's, then MPICH's (Hydra) and Open MPI's.
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK")
# How many processes of the job share this node, in the same launchers' order.
LOCAL_SIZE_VARIABLES = ("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
# Everything a launcher may set to place a process: the families of the MPI launchers (PMI,
# PMIx, Open MPI and its PRRTE runtime, Hydra, MPIR's debugger interface) and of torchrun's
# agent, by prefix, and torchrun's own names. A superset of the three lists above.
LAUNCHER_PREFIXES = ("PMI_", "PMIX_", "OMPI_", "PRTE_", "HYDRA_", "HYDI_", "MPI_LOCAL", "MPIR_",
                     "TORCHELASTIC_")
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                      "MASTER_ADDR", "MASTER_PORT")


def mpi_launcher(environ=os.environ):
    """The launcher variable present in the environment, or None without an MPI launcher."""
    return next((name for name in MPI_LAUNCHER_VARIABLES if name in environ), None)


def launcher_variables(environ=os.environ):
    """The names in the environment that place this process as a rank of a job, which a
    process it starts as something else (a DataLoader worker) must not inherit."""
    return [name for name in environ
            if name.startswith(LAUNCHER_PREFIXES) or name in TORCHRUN_VARIABLES]


def ranks_on_node(environ=os.environ):
    """How many ranks of this job the launcher placed on this node, or None when no launcher
    says (a plain `python script.py`). srun gives tasks per node as a list, "2(x3),1", read
    at this node's SLURM_NODEID."""
    for name in LOCAL_SIZE_VARIABLES:
        if environ.get(name, "").isdigit():
            return int(environ[name])
    per_node, node = environ.get("SLURM_STEP_TASKS_PER_NODE"), environ.get("SLURM_NODEID")
    if per_node and node is not None and node.isdigit():
        counts = []
        for part in per_node.split(","):
            count, _, repeat = part.partition("(x")
            counts += [count] * (int(repeat.rstrip(")")) if repeat else 1)
        if int(node) < len(counts) and counts[int(node)].isdigit():
            return int(counts[int(node)])
    return None
