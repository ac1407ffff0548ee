"""setup.py: builds torchtpu._C, the bridge (C++ glue + a CPython module in C) over the
C core (libtpu.a, built by the Makefile so that C flags live in one place).

Install with `pip install --no-build-isolation -e .` (the Makefile's `venv` target does);
torch must already be installed, since the bridge compiles against its headers.
"""
import glob
import os
import subprocess

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


class BuildExt(build_ext):
    """Builds libtpu.a first, then compiles .c and .cpp sources with their own flags."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def build_extensions(self):
        subprocess.check_call(["make", "-C", ROOT, "--no-print-directory", "lib"])
        # build_ext only compares sources with the extension: relink after a core change
        lib = os.path.join(ROOT, "build", "release", "libtpu.a")
        for ext in self.extensions:
            for out in (self.get_ext_fullpath(ext.name),
                        os.path.join(ROOT, *ext.name.split(".")[:-1],
                                     os.path.basename(self.get_ext_filename(ext.name)))):
                if os.path.exists(out) and os.path.getmtime(out) < os.path.getmtime(lib):
                    os.remove(out)
        original = self.compiler._compile

        def compile_one(obj, src, ext, cc_args, extra_postargs, pp_opts):
            flags = C_FLAGS if src.endswith(".c") else CXX_FLAGS
            original(obj, src, ext, cc_args, flags, pp_opts)

        self.compiler._compile = compile_one
        super().build_extensions()


bridge = Extension(
    "torchtpu._C",
    sources=["torchtpu/csrc/module.c"] + sorted(glob.glob("torchtpu/csrc/*.cpp")),
    include_dirs=["include", "torchtpu/csrc"],
    extra_objects=["build/release/libtpu.a"],
    library_dirs=[os.path.join(TORCH_DIR, "lib")],
    runtime_library_dirs=[os.path.join(TORCH_DIR, "lib")],
    libraries=["c10", "torch_cpu"],
    language="c++",
)

setup(ext_modules=[bridge], cmdclass={"build_ext": BuildExt})
