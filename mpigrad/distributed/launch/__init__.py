"""How processes become one MPI world, whoever started them (who did: `mpigrad.launchers`).

- `rendezvous`: processes that no MPI launcher started (torchrun, `init_method` URLs) meet
  and form one MPI world through `pmi_server`, or get an error saying how to launch.
- `pmi_server`: a small PMI-1 server, run as its own process, that MPICH's ranks initialise
  against as they would under mpiexec.
"""
