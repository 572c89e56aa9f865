"""Testing helpers for code built on mpigrad: `assert_close` (torch.testing's), and
`assert_same_on_all_ranks` for distributed code. The pytest plugin (markers, fixtures, the
ranks kept in step under mpiexec) is `plugin`, loaded by pytest through mpigrad's entry
point; docs/testing.md says how to use it."""
from .comparison import assert_close
from .ranks import assert_same_on_all_ranks

__all__ = ["assert_close", "assert_same_on_all_ranks"]
