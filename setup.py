"""setup.py: builds torchtpu._C, the bridge (C++ glue + a CPython module in C) over the
C core (libtpu.a, built by the Makefile so that C flags live in one place).

Install with `pip install --no-build-isolation -e .` (the Makefile's `venv` target does);
torch must already be installed, since the bridge compiles against its headers.
"""
import glob
import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

# torch would autoload the installed torchtpu, whose _C is what this builds.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
import torch  # noqa: E402
from setuptools import Extension, setup  # noqa: E402
from setuptools.command.build_ext import build_ext  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
TORCH_DIR = os.path.dirname(torch.__file__)
TORCH_INCLUDES = [
    os.path.join(TORCH_DIR, "include"),
    os.path.join(TORCH_DIR, "include", "torch", "csrc", "api", "include"),
]
ABI = "-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch.compiled_with_cxx11_abi())
WARNINGS = ["-Wall", "-Wextra", "-Werror"]
C_FLAGS = ["-std=c11", "-O2", "-g0"] + WARNINGS
# torch's headers are system headers for us: our warnings stay errors, theirs are silenced.
CXX_FLAGS = ["-std=c++20", "-O2", "-g0", ABI] + WARNINGS + [
    flag for inc in TORCH_INCLUDES for flag in ("-isystem", inc)
]


# Most bridge files include native.h, whose torch headers take ~6 s of each file's ~10 s
# to parse: they share one precompiled copy (GCC's PCH, built once per build).
PCH_HEADER = "native.h"


def includes_transitively(path, header, seen=None):
    """Whether |path| includes torchtpu/csrc/|header|, directly or through a local header."""
    seen = set() if seen is None else seen
    with open(path) as f:
        for name in re.findall(r'#include "([^"]+)"', f.read()):
            if name == header:
                return True
            local = os.path.join(ROOT, "torchtpu", "csrc", name)
            if local not in seen and os.path.exists(local):
                seen.add(local)
                if includes_transitively(local, header, seen):
                    return True
    return False


class BuildExt(build_ext):
    """Builds libtpu.a first, then compiles the bridge's sources with their own flags, in
    parallel (setuptools only builds different extensions in parallel), with native.h
    precompiled for the files that include it."""

    def build_extensions(self):
        jobs = str(os.cpu_count() or 1)
        subprocess.check_call(["make", "-C", ROOT, "--no-print-directory", "-j", jobs, "lib"])
        # build_ext only compares sources with the extension: relink after a core change
        lib = os.path.join(ROOT, "build", "release", "libtpu.a")
        for ext in self.extensions:
            for out in (self.get_ext_fullpath(ext.name),
                        os.path.join(ROOT, *ext.name.split(".")[:-1],
                                     os.path.basename(self.get_ext_filename(ext.name)))):
                if os.path.exists(out) and os.path.getmtime(out) < os.path.getmtime(lib):
                    os.remove(out)
        self._parallel_compile()
        super().build_extensions()

    def _parallel_compile(self):
        compiler = self.compiler
        original_compile, original_one = compiler.compile, compiler._compile
        pch_dir = os.path.join(os.path.abspath(self.build_temp), "pch")
        pch_include = os.path.join(pch_dir, "bridge_pch.h")
        pch_lock = threading.Lock()
        pch_built = []

        def build_pch(cc_args, pp_opts):
            with pch_lock:  # the first file that needs it builds it; the others wait
                if pch_built:
                    return
                os.makedirs(pch_dir, exist_ok=True)
                with open(pch_include, "w") as f:
                    f.write('#include "%s"\n' % PCH_HEADER)
                cxx = getattr(compiler, "compiler_so_cxx", compiler.compiler_so)
                subprocess.check_call(cxx + cc_args + pp_opts + CXX_FLAGS +
                                      ["-x", "c++-header", pch_include, "-o", pch_include + ".gch"])
                pch_built.append(True)

        def compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts):
            if src.endswith(".c"):
                return original_one(obj, src, ext, cc_args, C_FLAGS, pp_opts)
            flags = CXX_FLAGS
            if includes_transitively(src, PCH_HEADER):
                build_pch(cc_args, pp_opts)
                # an unusable PCH is a warning (the build is only slower), not an error
                flags = flags + ["-Winvalid-pch", "-Wno-error=invalid-pch", "-include", pch_include]
            original_one(obj, src, ext, cc_args, flags, pp_opts)

        def compile_all(sources, **kwargs):
            # files without the PCH first, so one core compiles them while the other builds it
            order = sorted(sources, key=lambda s: (s.endswith(".cpp") and
                                                   includes_transitively(s, PCH_HEADER),
                                                   -os.path.getsize(s)))
            with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                objects = dict(zip(order, pool.map(lambda s: original_compile([s], **kwargs), order)))
            return [obj for src in sources for obj in objects[src]]

        compiler._compile = compile_one
        compiler.compile = compile_all


bridge = Extension(
    "torchtpu._C",
    sources=["torchtpu/csrc/module.c"] + sorted(glob.glob("torchtpu/csrc/*.cpp")),
    include_dirs=["include", "torchtpu/csrc"],
    extra_objects=["build/release/libtpu.a"],
    library_dirs=[os.path.join(TORCH_DIR, "lib")],
    runtime_library_dirs=[os.path.join(TORCH_DIR, "lib")],
    libraries=["c10", "torch_cpu", "torch_python"],
    language="c++",
)

setup(ext_modules=[bridge], cmdclass={"build_ext": BuildExt})
