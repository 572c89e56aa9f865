"""Atomic writes for every file format `save` writes, and the clean-up of dead writers' files.

A file goes to a hidden temporary `.mpigrad-save.<name>.<random>.tmp` in the target's
directory, is flushed to disk, and only then renamed over the target, so a reader sees the old
file or the new one, never half of one. The writer holds an exclusive `flock` on its temporary
for as long as it writes; the lock dies with the process, even on `kill -9`, so every save (and
`remove_stale_temporaries`) deletes the temporaries in its directory that no live writer holds,
and never another writer's work in progress. It deletes only save's own: regular files of this
user whose names carry the `.mpigrad-save.` prefix. Other programs' files named like
`.x.<12 hex digits>.tmp` (the pattern without the prefix, which versions before it matched)
are not save's to remove, nor are another user's temporaries. On a file system without locks
(Lustre mounted without `flock`) saves still work, and no temporary is ever deleted.
"""
import errno
import fcntl
import os
import re
import secrets
import stat

__all__ = ["write_atomically", "remove_stale_temporaries"]

_PREFIX = ".mpigrad-save."
_TEMPORARY = re.compile(re.escape(_PREFIX) + r".+\.[0-9a-f]{12}\.tmp")
# What flock raises where the file system has no locks: nobody can be proven dead there.
_NO_LOCKS = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL)


def write_atomically(path, write):
    """Call `write(file)` on a locked temporary beside `path`, then rename it over `path`."""
    directory, name = os.path.split(os.path.abspath(os.fspath(path)))
    remove_stale_temporaries(directory)
    descriptor, temporary = _create_locked_temporary(directory, name)
    try:
        with os.fdopen(descriptor, "w+b") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
            # Renamed while still locked: a cleaner never sees an unlocked, finished temporary.
            os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    _fsync_directory(directory)


def remove_stale_temporaries(directory):
    """Delete the `.mpigrad-save.<name>.<random>.tmp` files that `save` left in
    `directory` when its process died mid-write; the temporaries of live writers (locked)
    stay. Anything else wearing a temporary's name (a FIFO, a device, a symlink, another
    user's file) is left alone and never opened in a way that could block. Returns the
    names removed."""
    removed = []
    for entry in os.listdir(directory):
        if not _TEMPORARY.fullmatch(entry):
            continue
        candidate = os.path.join(directory, entry)
        try:
            # O_NONBLOCK: opening a FIFO for reading would wait for a writer forever.
            descriptor = os.open(candidate, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue  # renamed or removed by its writer meanwhile, or a symlink
        try:
            status = os.fstat(descriptor)
            if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid():
                continue
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Locked, so its writer is gone; the name must still be this file.
            if os.stat(candidate, follow_symlinks=False).st_ino == status.st_ino:
                os.unlink(candidate)
                removed.append(entry)
        except OSError as err:
            if err.errno in _NO_LOCKS:
                break
            # Otherwise held by a live writer, or gone meanwhile.
        finally:
            os.close(descriptor)
    return removed


def _create_locked_temporary(directory, name):
    while True:
        temporary = os.path.join(directory, f"{_PREFIX}{name}.{secrets.token_hex(6)}.tmp")
        # os.open with 0o666 (not mkstemp's 0o600) so the file gets the same permissions as
        # any other file the user creates under their umask.
        descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError as err:
            if err.errno not in _NO_LOCKS:
                os.close(descriptor)
                os.unlink(temporary)
                raise
            return descriptor, temporary  # no cleaner can run here either
        # Another process's cleaner may have locked and deleted the file between its
        # creation and our lock; then start over with a new name.
        try:
            if os.stat(temporary).st_ino == os.fstat(descriptor).st_ino:
                return descriptor, temporary
        except FileNotFoundError:
            pass
        os.close(descriptor)


def _fsync_directory(directory):
    """Make the rename itself durable: it lives in the directory's entries."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
