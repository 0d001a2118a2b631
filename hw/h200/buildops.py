#!/usr/bin/env python3
"""Build LMCache 0.5.6's compiled CUDA ops (``lmcache.cuda_ops``) for the GPU image's torch.

    buildops.py CSRC_TGZ WORKDIR          (run on the GPU machine; nvcc and torch are there)

The wheel's ``cuda_ops`` is built for torch 2.13 and does not load with the image's 2.11
(``compiled extension not found``: every copy to the GPU then runs on LMCache's torch
fallback). This compiles the same sources LMCache's ``setup_extensions/build_profiles/cuda.py``
lists, from the 0.5.6 sdist's ``csrc/`` (``hw/h200/ship.sh`` packs it), for the H200 only
(``TORCH_CUDA_ARCH_LIST=9.0``: one architecture, a fraction of the release build's time), with
torch's own ``cpp_extension`` (the ABI flag and include paths of the torch that will load it).
The result lands in ``WORKDIR/lmcache/cuda_ops.*.so``; ``WORKDIR/rc`` holds the exit status.
gpu.sh starts it in its own session during the transfers and installs the result before the
first engine start.
"""

import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

SOURCES = [
    "csrc/cuda/pybind.cpp", "csrc/cuda/mem_kernels.cu", "csrc/cuda/mp_mem_kernels.cu",
    "csrc/cuda/phase_timing_recorder.cu", "csrc/cuda/blend_kernels.cu", "csrc/cuda/cal_cdf.cu",
    "csrc/cuda/ac_enc.cu", "csrc/cuda/ac_dec.cu", "csrc/cuda/pos_kernels.cu",
    "csrc/cuda/mem_alloc.cpp", "csrc/cuda/utils.cpp", "csrc/cuda/event_recorder.cpp",
    "csrc/cuda/completion_recorder.cpp",
]  # fmt: skip

# lmcache_native too, from the same sources and toolchain: cuda_ops takes lmcache_native's
# pybind11 types (PageBufferShapeDesc, KernelGroupSpec), which pybind11 shares between modules
# only when both were built with the same pybind11 internals (compiler, headers). Loan 12: the
# rebuilt cuda_ops beside the wheel's lmcache_native refused every store
# (`DirectCopyGroupSpec.__init__(): incompatible constructor arguments`): nothing reached L1.
NATIVE = [
    "csrc/lmcache_native/bitmap.cpp", "csrc/lmcache_native/fold.cpp",
    "csrc/lmcache_native/periodic_event_notifier.cpp", "csrc/lmcache_native/pybind.cpp",
    "csrc/lmcache_native/ttl_lock.cpp", "csrc/lmcache_native/utils.cpp",
]  # fmt: skip

SETUP = """
from setuptools import setup
from torch.utils import cpp_extension
setup(
    name="lmcache-cuda-ops",
    ext_modules=[
        cpp_extension.CppExtension(
            "lmcache.lmcache_native", sources={native!r},
            include_dirs=[{csrc!r} + "/lmcache_native", {csrc!r}],
            extra_compile_args={{"cxx": ["-O3"]}}),
        cpp_extension.CUDAExtension(
            "lmcache.cuda_ops", sources={sources!r}, include_dirs=[{csrc!r}],
            extra_compile_args={{"cxx": ["-O3"], "nvcc": ["-O3"]}}),
    ],
    cmdclass={{"build_ext": cpp_extension.BuildExtension}},
)
"""


def main(tgz: str, work: str) -> int:
    w = Path(work)
    (w / "lmcache").mkdir(parents=True, exist_ok=True)
    with tarfile.open(tgz) as t:
        t.extractall(w, filter="data")
    # absolute: nvcc runs in the build directory, where "csrc" finds nothing (the H200 run of
    # 2026-12-01: kv_transfer_types.h not found)
    csrc = str(w.resolve() / "csrc")
    (w / "setup_ops.py").write_text(SETUP.format(sources=SOURCES, native=NATIVE, csrc=csrc))
    env = dict(os.environ, TORCH_CUDA_ARCH_LIST="9.0", MAX_JOBS=str(os.cpu_count() or 8))
    t0 = time.time()
    with open(w / "build.log", "w") as log:
        rc = subprocess.call([sys.executable, "setup_ops.py", "build_ext", "--inplace"],
                             cwd=w, env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    built = sorted(str(p) for p in (w / "lmcache").glob("*.so"))
    (w / "result.txt").write_text(f"rc {rc} in {time.time() - t0:.0f}s: {' '.join(built)}\n")
    (w / "rc").write_text(f"{rc if len(built) == 2 else rc or 1}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
