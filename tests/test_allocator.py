"""mpigrad tunes glibc's malloc at import so that a freed large array's pages are reused,
not faulted in again (mpigrad/_allocator.py)."""
import os
import subprocess
import sys

import pytest

from mpigrad import _allocator

# A 40 MiB array: above glibc's largest dynamic mmap threshold (32 MiB), below ours (64 MiB).
# glibc's mallinfo2 says where it lives (hblkhd: bytes in mmapped blocks) and, once freed,
# whether its pages stayed in the process (arena: bytes of the heap).
PROGRAM = """
import ctypes, numpy as np, mpigrad
class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena ordblks smblks hblks hblkhd "
                "usmblks fsmblks uordblks fordblks keepcost").split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
a = np.ones(40 << 18, np.float32)
mapped = libc.mallinfo2().hblkhd
del a
print(mpigrad._allocator.state, mapped >> 20, libc.mallinfo2().arena >> 20)
"""


def _run(**variables):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(variables)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, check=True, timeout=120,
                         capture_output=True, text=True).stdout.split()
    return out[0], int(out[1]), int(out[2])


glibc = pytest.mark.skipif(_allocator._glibc() is None or not hasattr(_allocator._glibc(),
                                                                       "mallinfo2"),
                           reason="malloc tuning is glibc's (mallinfo2 from glibc 2.33)")


@glibc
def test_a_freed_large_arrays_pages_stay_in_the_process():
    state, mapped_mib, heap_mib = _run()
    assert state == "tuned"
    assert mapped_mib < 40 <= heap_mib


@glibc
def test_the_opt_out_leaves_malloc_alone():
    state, mapped_mib, heap_mib = _run(MPIGRAD_MALLOC_TUNING="0")
    assert state == "off"
    assert mapped_mib >= 40 > heap_mib  # its own mapping, given back when freed


@glibc
def test_glibcs_own_variables_win():
    assert _run(MALLOC_TRIM_THRESHOLD_="1000000000")[0] == "user's"


def test_a_malformed_setting_is_an_error():
    with pytest.raises(ValueError, match="MPIGRAD_MALLOC_TUNING"):
        _allocator.tune({"MPIGRAD_MALLOC_TUNING": "yes"})
