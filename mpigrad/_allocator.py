"""glibc's malloc tuned for training loops, at import.

By default glibc serves arrays above 128 KiB (a threshold that grows to at most 32 MiB) with
their own mmap and hands their pages back to the kernel when they are freed, and trims the
heap's top above 128 KiB. A training step frees and allocates the same large activations
every step, so each step faulted all their pages in again: in measurements the GPT step spent
a third of its time in page faults. Fixing the mmap threshold at 64 MiB and the trim
threshold at 256 MiB keeps those pages in the process (the same as
`MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=268435456` in the environment): a
process holds on to up to 256 MiB of freed memory at its heap's top, and arrays of 64 MiB or
more still come and go with mmap.

`MPIGRAD_MALLOC_TUNING=0` leaves malloc as it is; so do glibc's own `MALLOC_MMAP_THRESHOLD_` /
`MALLOC_TRIM_THRESHOLD_` when set (the user's choice wins). Elsewhere than glibc (musl,
macOS) nothing is done.
"""
import ctypes
import os

MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 256 << 20
# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# What tune() did, for tests and for a curious user: "tuned", "off", "user's", "not glibc".
state = None


def _glibc():
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # only glibc has it
        libc.mallopt
    except (OSError, AttributeError):
        return None
    return libc


def tune(environ=os.environ):
    global state
    setting = environ.get("MPIGRAD_MALLOC_TUNING", "1")
    if setting not in ("0", "1"):
        raise ValueError(f"MPIGRAD_MALLOC_TUNING must be 0 or 1, got {setting!r}")
    libc = _glibc()
    if setting == "0":
        state = "off"
    elif libc is None:
        state = "not glibc"
    elif "MALLOC_MMAP_THRESHOLD_" in environ or "MALLOC_TRIM_THRESHOLD_" in environ:
        state = "user's"
    else:
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        ok = (libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
              and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        state = "tuned" if ok else "not glibc"
    return state


tune()
