"""numba's on-disk cache for the loops here, keyed by every source file of this package.

numba checks a cached loop against the file that defines it only, so a loop in
activations.py that inlines `_math.exp` would keep loading the old exp after `_math.py`
changed. Each loop's locator here is numba's own (NUMBA_CACHE_DIR, then the package's
`__pycache__`, then the user's cache directory) with a hash of this whole package's files
as its stamp: changing any of them invalidates every loop's cache, and nothing else does
(a touched file, or a fresh clone of the same code at the same path with NUMBA_CACHE_DIR
kept from before, still loads).
"""
import hashlib
import os

from numba.core import caching

_HERE = os.path.dirname(os.path.abspath(__file__))
_CACHE_IMPLEMENTATION = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # < 0.65


def package_stamp(directory=_HERE):
    """A hash of the contents of every .py file in `directory`."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        if name.endswith(".py"):
            with open(os.path.join(directory, name), "rb") as source:
                digest.update(name.encode() + b"\0" + source.read() + b"\0")
    return digest.hexdigest()


class PackageLocator:
    """numba's locator for a loop of this package, with the package's stamp added."""
    stamp = None

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get_source_stamp(self):
        # the package's contents only, not numba's stamp of the one file (its modification
        # time before numba 0.6x): a fresh clone or a touched file keeps the cache
        return PackageLocator.stamp

    @classmethod
    def from_function(cls, py_func, py_file):
        if os.path.dirname(os.path.abspath(py_file)) != _HERE:
            return None
        if cls.stamp is None:
            cls.stamp = package_stamp()
        for numbas in _CACHE_IMPLEMENTATION._locator_classes:
            if numbas is not cls:
                inner = numbas.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


if PackageLocator not in _CACHE_IMPLEMENTATION._locator_classes:
    _CACHE_IMPLEMENTATION._locator_classes.insert(0, PackageLocator)
