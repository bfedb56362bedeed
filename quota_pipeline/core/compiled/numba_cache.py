"""Where numba keeps the compiled decision, and when a cached compilation is stale.

Staleness: numba stamps a cached function with the text of its own module only, but the kernel's loop inlines the
steps and the arithmetic of the modules beside it. So every function this package compiles is stamped with the text
of every module of its folder: changing any of them compiles them all again, never serving a loop that inlined an
older step.

Place: spark-submit ships the package to executors as a zip (--py-files), unpacked under each application's own work
directory. numba caches a zipped module's functions under a directory named by the zip's full path, so every new
application (a restarted job) and every new executor would miss the cache and compile the kernel again, while the
brokers wait for a decision. The zip locator below names the cache by the module's path inside the zip instead. numba
also checks the CPU an entry was compiled for, so another host compiles.
"""
from __future__ import annotations

import functools
import hashlib
import os
import zipfile
from pathlib import Path, PurePosixPath

from numba.core import caching, config

PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../quota_pipeline


def _in_package(py_file: str) -> bool:
    """`py_file` is a module of this package (a file, or a path inside a zip)."""
    if ".zip" in py_file:
        return caching.ZipCacheLocator._split_zip_path(py_file)[1].startswith(os.path.basename(PACKAGE) + "/")
    return os.path.abspath(py_file).startswith(PACKAGE + os.sep)


@functools.lru_cache(maxsize=None)
def _folder_hash(where: str, versions: tuple) -> bytes:
    """sha256 over (name, text) of each module in `versions` (name, mtime, size), read from the folder or the zip."""
    digest = hashlib.sha256()
    if where.endswith(".zip"):
        with zipfile.ZipFile(where) as z:
            for name, _, _ in versions:
                digest.update(name.encode() + b"\0" + z.read(name) + b"\0")
    else:
        for name, _, _ in versions:
            digest.update(name.encode() + b"\0" + Path(where, name).read_bytes() + b"\0")
    return digest.digest()


def folder_stamp(py_file: str) -> bytes:
    """The stamp of every module beside `py_file` (a file, or a path inside a zip)."""
    if ".zip" in py_file:
        zip_path, internal = caching.ZipCacheLocator._split_zip_path(py_file)
        folder = str(PurePosixPath(internal).parent)
        with zipfile.ZipFile(zip_path) as z:
            versions = tuple(sorted((i.filename, i.date_time, i.file_size) for i in z.infolist()
                                    if str(PurePosixPath(i.filename).parent) == folder
                                    and i.filename.endswith(".py")))
        return _folder_hash(zip_path, versions)
    folder = os.path.dirname(os.path.abspath(py_file))
    versions = tuple(sorted((e.name, e.stat().st_mtime_ns, e.stat().st_size) for e in os.scandir(folder)
                            if e.name.endswith(".py")))
    return _folder_hash(folder, versions)


class _FolderStamp:
    """A locator of numba's, for this package's functions only, stamped with every module of the function's folder."""

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _in_package(py_file):
            return None
        return super().from_function(py_func, py_file)

    def get_source_stamp(self):
        return folder_stamp(self._py_file)


class ZipPackageLocator(_FolderStamp, caching.ZipCacheLocator):
    """numba's locator for a function of a zipped module, its cache under NUMBA_CACHE_DIR (else numba's user cache)
    in a directory named for the module's folder in the zip, not for the zip's location."""

    def __init__(self, py_func, py_file):
        super().__init__(py_func, py_file)
        base = config.CACHE_DIR or os.path.dirname(self._cache_path)
        folder = os.path.dirname(self._internal_path).replace("/", "-") or "top"
        self._cache_path = os.path.join(base, "zipped", folder)

    @classmethod
    def from_function(cls, py_func, py_file):
        if ".zip" not in py_file or not _in_package(py_file):
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:  # no writable cache directory: numba's own locators decide (it compiles, uncached)
            return None
        return self


class _UserProvided(_FolderStamp, caching.UserProvidedCacheLocator):
    pass


class _InTree(_FolderStamp, caching.InTreeCacheLocator):
    pass


class _UserWide(_FolderStamp, caching.UserWideCacheLocator):
    pass


LOCATORS = (ZipPackageLocator, _UserProvided, _InTree, _UserWide)


def install() -> None:
    """Put this package's locators first, before numba's own (call before the kernel's functions are decorated)."""
    classes = caching.CacheImpl._locator_classes
    for locator in reversed(LOCATORS):
        if locator not in classes:
            classes.insert(0, locator)
