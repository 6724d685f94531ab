"""Build step of the ringkv Python package: bundles libringkv next to the
package, so that an installed ``ringkv`` finds it without RINGKV_LIBRARY.

The library copied into the package is, in order: the file named by the
environment variable RINGKV_LIBRARY at build time; ringkv/libringkv.so when it
was copied there by hand; ../build/libringkv.so (the repository's default
CMake build folder). With none of them the package is installed without the
library and finds it at run time through RINGKV_LIBRARY or the system library
path (a library installed with ``cmake --install``). The CUDA backend's
libringkv_cuda.so is bundled beside it when there is one: the file named by
RINGKV_CUDA_LIBRARY, else the one beside the chosen libringkv.so (a CUDA
build puts both in its build folder). Everything else is in pyproject.toml.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _library():
    candidates = [os.environ.get("RINGKV_LIBRARY"),
                  os.path.join(HERE, "ringkv", "libringkv.so"),
                  os.path.join(HERE, "..", "build", "libringkv.so")]
    for path in candidates:
        if path and os.path.isfile(path):
            return os.path.realpath(path)
    return None


def _cuda_library(core):
    env = os.environ.get("RINGKV_CUDA_LIBRARY")
    for path in ([env] if env else [os.path.join(os.path.dirname(core), "libringkv_cuda.so")]):
        if path and os.path.isfile(path):
            return os.path.realpath(path)
    return None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = _library()
        dest = os.path.join(self.build_lib, "ringkv", "libringkv.so")
        if lib is None:
            print("ringkv: no libringkv.so found (set RINGKV_LIBRARY=<build>/libringkv.so); the "
                  "package will need RINGKV_LIBRARY or a system-installed libringkv at run time")
            return
        if os.path.realpath(dest) != lib:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(lib, dest)
        print(f"ringkv: bundled {lib} as {dest}")
        # libringkv_cuda.so needs libringkv.so.0.2, which is the bundled
        # libringkv.so (its SONAME), already loaded when the binding loads it
        cuda = _cuda_library(lib)
        if cuda is not None:
            cuda_dest = os.path.join(self.build_lib, "ringkv", "libringkv_cuda.so")
            if os.path.realpath(cuda_dest) != cuda:
                shutil.copyfile(cuda, cuda_dest)
            print(f"ringkv: bundled {cuda} as {cuda_dest}")


cmdclass = {"build_py": BuildPyWithLibrary}
try:  # setuptools >= 70.1 has bdist_wheel; older ones take it from `wheel`
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:
        bdist_wheel = None

if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """A wheel that bundles libringkv is for one platform (py3-none-
        linux_x86_64 ...), not py3-none-any; the library is loaded through
        ctypes, so any CPython 3 will do."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = _library() is None

        def get_tag(self):
            python, abi, plat = super().get_tag()
            return ("py3", "none", plat) if not self.root_is_pure else (python, abi, plat)

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass)
