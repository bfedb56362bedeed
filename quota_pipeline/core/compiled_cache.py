"""Where numba keeps the compiled kernel when the package is imported from a zip, at a path that outlasts the process.

spark-submit ships the package to executors as a zip (--py-files), unpacked under each application's own work
directory. numba caches a zipped module's functions under a directory named by the zip's full path, so every new
application (a restarted job) and every new executor missed the cache and compiled the kernel again: about a minute
on a 2-core host, while the brokers wait for a decision. This locator names the cache by the module's path inside the
zip instead. A cached kernel is only used for the same source: numba stamps each entry with a hash of the module's
text and checks the CPU it was compiled for, so another release of the package, or another host, compiles.
"""
from __future__ import annotations

import os

from numba.core import caching, config


class ZipPackageLocator(caching.ZipCacheLocator):
    """numba's locator for a function of a zipped module, its cache under NUMBA_CACHE_DIR (else numba's user cache)
    in a directory named for the module's folder in the zip, not for the zip's location."""

    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        base = config.CACHE_DIR or os.path.dirname(self._cache_path)
        folder = os.path.dirname(self._internal_path).replace("/", "-") or "top"
        self._cache_path = os.path.join(base, "zipped", folder)

    @classmethod
    def from_function(cls, py_func, py_file):
        if ".zip" not in py_file:
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:  # no writable cache directory: numba's own locators decide (it compiles, uncached)
            return None
        return self


def install() -> None:
    """Put the locator first, before numba's own (call before the kernel's functions are decorated)."""
    if ZipPackageLocator not in caching.CacheImpl._locator_classes:
        caching.CacheImpl._locator_classes.insert(0, ZipPackageLocator)
