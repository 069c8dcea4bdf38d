# SPDX-License-Identifier: BSD-3-Clause
"""Runs a function once a module has been imported, without importing that module ourselves.

``import custom_ops`` uses it to add its entries to Inductor's decomposition table
(``torch._inductor.decomposition``, seconds to import) only once the program loads Inductor; torch
has no hook of its own for that. One finder at the front of ``sys.meta_path``, there only while a
watched module is still to be imported, holds ``{module name: [functions]}`` (as wrapt's
post-import hooks do): for a watched name it asks the other finders for the spec (an in-progress
guard keeps it from asking itself), wraps the spec's loader, and calls the functions right after
the module's code has run. It relies only on importlib's ``find_spec``/``exec_module`` protocol,
nothing of torch's.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import threading
from collections.abc import Callable

_lock = threading.RLock()
_watches: dict[str, list[Callable[[], None]]] = {}


def when_imported(name: str, function: Callable[[], None]) -> None:
    """Calls ``function()`` now if module ``name`` is imported, else once its first import has run.

    The call happens inside that import statement, after the module's own code, so the module is
    complete by then. Watching with the same function again (``importlib.reload(custom_ops)``)
    changes nothing. ``function`` must not raise: an error would fail the import that triggered
    it. An import that fails leaves the watch in place for the next attempt.
    """
    with _lock:
        if name not in sys.modules:
            functions = _watches.setdefault(name, [])
            if function not in functions:
                functions.append(function)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
            return
    function()


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self):
        # The names this thread is finding a spec for: the in-progress guard, as find_spec asks
        # sys.meta_path, this finder included, again.
        self._in_progress = threading.local()

    def find_spec(self, fullname, path, target=None):
        in_progress = vars(self._in_progress)
        if fullname not in _watches or fullname in in_progress:
            return None
        in_progress[fullname] = True
        try:
            spec = importlib.util.find_spec(fullname)  # the spec the import would get without us
        finally:
            del in_progress[fullname]
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # not found, a namespace package or a legacy loader: nothing to wrap
        spec.loader = _CallAfterExec(spec.loader)
        return spec


class _CallAfterExec(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its real loader (importlib.resources, inspect and reload ask it).
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        with _lock:
            functions = _watches.pop(module.__name__, [])
            if not _watches and _FINDER in sys.meta_path:
                sys.meta_path.remove(_FINDER)
        for function in functions:
            function()


_FINDER = _Finder()
