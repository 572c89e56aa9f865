"""MPI's shared-memory segments in /dev/shm, unlinked as soon as they cannot be needed by name.

MPICH (and Open MPI's shared-memory transport) map a file under /dev/shm on each node for the
ranks there to talk through, and unlink it only in MPI_Finalize. Every job that aborted
(MPI_Abort, a rank killed, a failed rendezvous) left its 2 MB file behind, in memory, until
the node's /dev/shm filled and jobs failed to start. Once every rank has finished MPI_Init
(init_process_group's first collective proves it, or init_rpc's exchange of names), each has
mapped the segment, and a mapped file needs no name: unlinking it then frees the memory with
the last process whatever way the job ends. Segments MPI maps later are unlinked on the
abort path. Only files this process has mapped and whose names are MPI's are touched, so no
other job's (nor this job's other libraries') segments are.
"""
import os

_MPI_PREFIXES = ("mpich_shm_", "vader_segment", "sm_segment")
_SHM = "/dev/shm/"


def mapped_mpi_segments():
    """The paths of MPI's shared-memory files this process maps and that still have a name."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                path = fields[5].rstrip("\n") if len(fields) == 6 else ""
                if (path.startswith(_SHM) and path[len(_SHM):].startswith(_MPI_PREFIXES)
                        and not path.endswith(" (deleted)")):
                    paths.add(path)
    except OSError:  # not Linux: nothing to read, and nothing this module can clean
        pass
    return paths


def release():
    """Unlink MPI's mapped segments (another local rank may have done it already)."""
    for path in mapped_mpi_segments():
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
