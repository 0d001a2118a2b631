"""Loan 12's experiment, not a fix kvceph ships: vLLM 0.34 dropped
``CachedRequestData.resumed_req_ids`` (a resumed request comes back as a new one), which
LMCache 0.5.6's LMCacheMPConnector still reads on every scheduled step. This gives the class an
empty one, so the rest of the MP path (the server, CUDA IPC, kvceph's L2) can be tried."""

import importlib.abc
import importlib.machinery
import sys

TARGET = "vllm.v1.core.sched.output"


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            cls = getattr(module, "CachedRequestData", None)
            if cls is not None and not hasattr(cls, "resumed_req_ids"):
                cls.resumed_req_ids = frozenset()
                print("[shim052] CachedRequestData.resumed_req_ids = frozenset()", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
