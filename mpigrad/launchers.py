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
