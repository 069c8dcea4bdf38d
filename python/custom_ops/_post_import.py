"""Runs a function once a module has been imported, without importing that module ourselves.

``import custom_ops`` uses it for what it adds to two heavy parts of torch that most users of the
op never load: Inductor's decomposition table (``torch._inductor.decomposition``) and the DTensor
sharding rules (``torch.distributed.tensor``, about two seconds to import). Both are needed only
once those modules are loaded, and torch offers no hook of its own (its built-in DTensor rules,
say, are registered by ``torch.distributed.tensor`` importing them), so this watches the import
itself: a finder at the front of ``sys.meta_path`` that, for the one module name, wraps the loader
the other finders return and calls the function right after the module's code has run. It relies
only on importlib's ``find_spec``/``exec_module`` protocol, nothing of torch's.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Callable


def when_imported(name: str, function: Callable[[], None]) -> None:
    """Calls ``function()`` now if module ``name`` is imported, else once its first import has run.

    The call happens inside that import statement, after the module's own code, so the module is
    complete by then. ``function`` must not raise: an error would fail the import that triggered
    it. An import that fails leaves the watch in place for the next attempt.
    """
    if name in sys.modules:
        function()
        return
    sys.meta_path.insert(0, _Watch(name, function))


class _Watch(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, function: Callable[[], None]):
        self.name = name
        self.function = function

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        # The spec the import would get without us: ask the finders behind this one.
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # a namespace package or a legacy loader: nothing to wrap
        spec.loader = _CallAfterExec(spec.loader, self)
        return spec

    def module_ran(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        self.function()


class _CallAfterExec(importlib.abc.Loader):
    def __init__(self, loader, watch: _Watch):
        self.loader = loader
        self.watch = watch

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        # The module keeps its real loader (importlib.resources, inspect and reload ask it).
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.watch.module_ran()
