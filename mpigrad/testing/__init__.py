"""Testing helpers for code built on mpigrad, and its pytest plugin (`plugin`)."""
