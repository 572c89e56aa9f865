"""What keeps a failure on one rank from becoming a hang or a silent error on the others.

- `watchdog`: every blocking MPI call runs inside `blocked(pg, what)`; a rank stuck longer
  than the group's timeout, or waiting on a rank that has left, ends the job with a report
  of where every rank was.
- `abort`: an uncaught exception on any rank aborts the whole job, with that rank's traceback.
- `checks`: before a collective, the ranks compare what they are about to do (op, dtype,
  shape, root) and all raise `CollectiveMismatchError` naming the ranks that differ.
- `segments`: MPI's shared-memory files in /dev/shm unlinked once no one needs them by name,
  so an aborted job leaves nothing behind.
"""
