"""Build script for the C++ kernels; the package metadata lives in pyproject.toml.

Every core/kernels/src/<stem>.cpp becomes its own pybind11 module `mstrain.kernels._<stem>`, and
every <kit>/kernels/src/<stem>.cpp the module `mstrain.<kit>.kernels._<stem>` (core/kernels/src is on
the include path, so kits share its headers), compiled
with the system compiler (-O3, plus -fopenmp when the compiler accepts it). A kernel that fails to
compile does not fail the installation: it is skipped with a warning and mstrain.kernels runs its
numpy reference instead. `pip install -e .` builds the modules in place, next to the sources.
"""
import glob
import os
import re
import sys

from setuptools import find_packages, setup

try:
    from pybind11.setup_helpers import Pybind11Extension, build_ext
except ImportError:  # pybind11 is a build requirement; without it only the numpy kernels exist
    Pybind11Extension = build_ext = None

KERNEL_DIR = os.path.join("core", "kernels", "src")

# Installed package name -> folder of the checkout. core/ is `mstrain`; each kit is `mstrain.<kit>`.
PACKAGE_ROOTS = {"mstrain": "core", "mstrain.gnn": "gnn", "mstrain.transformer": "transformer",
                 "mstrain.recommender": "recommender", "mstrain.reinforcement": "reinforcement"}


def _packages():
    packages = []
    for name, folder in PACKAGE_ROOTS.items():
        packages.append(name)
        packages.extend(f"{name}.{sub}" for sub in find_packages(folder))
    return packages


def _kernel_extensions():
    if Pybind11Extension is None:
        print("mstrain: pybind11 is not installed; C++ kernels are skipped (numpy fallback)", file=sys.stderr)
        return []
    extensions = []
    for package, folder in PACKAGE_ROOTS.items():  # core's kernels and each kit's own
        source_dir = os.path.join(folder, "kernels", "src")
        for source in sorted(glob.glob(os.path.join(source_dir, "*.cpp"))):
            stem = os.path.splitext(os.path.basename(source))[0]
            extensions.append(_extension(f"{package}.kernels._{stem}", source, source_dir))
    return extensions


def _extension(name, source, source_dir):
    return Pybind11Extension(
        name, [source], include_dirs=[source_dir, KERNEL_DIR], cxx_std=17,
        # editing a header the source includes rebuilds the module on the next install
        depends=sorted(_included_headers(source, [source_dir, KERNEL_DIR])),
        # -fno-math-errno lets sqrt vectorise (results unchanged); no -ffast-math: it breaks NaN checks
        extra_compile_args=["-O3", "-fno-math-errno"],
    )


def _included_headers(source, include_dirs, found=None):
    """The project headers `source` includes with #include "...", followed through the headers."""
    found = set() if found is None else found
    with open(source) as f:
        names = re.findall(r'^\s*#\s*include\s*"([^"]+)"', f.read(), re.MULTILINE)
    for name in names:
        candidates = [os.path.join(os.path.dirname(source), name)] + [os.path.join(d, name) for d in include_dirs]
        header = next((os.path.normpath(c) for c in candidates if os.path.isfile(c)), None)
        if header is not None and header not in found:
            found.add(header)
            _included_headers(header, include_dirs, found)
    return found


def _make_lenient_build_ext():
    if build_ext is None:
        return {}

    class LenientBuildExt(build_ext):
        """Builds each kernel on its own; adds OpenMP when the compiler has it; a failure only warns."""

        def build_extensions(self):
            openmp = self._compiler_accepts("-fopenmp")
            for extension in self.extensions:
                if openmp:
                    extension.extra_compile_args = list(extension.extra_compile_args) + ["-fopenmp"]
                    extension.extra_link_args = list(extension.extra_link_args) + ["-fopenmp"]
            self._failed = []
            super().build_extensions()
            # Forget the failures so that the in-place copy and the wheel do not look for them.
            self.extensions = [e for e in self.extensions if e.name not in self._failed]

        def build_extension(self, extension):
            try:
                super().build_extension(extension)
            except Exception as exc:  # compiler or linker failure of one kernel: keep installing
                self._failed.append(extension.name)
                print(f"mstrain: WARNING: could not build {extension.name} ({type(exc).__name__}: see the "
                      "compiler output above); "
                      "mstrain.kernels uses its numpy fallback", file=sys.stderr)

        def _compiler_accepts(self, flag):
            import tempfile
            with tempfile.TemporaryDirectory() as tmp:
                probe = os.path.join(tmp, "probe.cpp")
                with open(probe, "w") as f:
                    f.write("#include <omp.h>\nint main() { return omp_get_max_threads() > 0 ? 0 : 1; }\n")
                try:
                    objects = self.compiler.compile([probe], output_dir=tmp, extra_postargs=[flag])
                    self.compiler.link_executable(objects, "probe", output_dir=tmp, extra_postargs=[flag])
                except Exception:
                    return False
            return True

    return {"build_ext": LenientBuildExt}


setup(packages=_packages(), package_dir=PACKAGE_ROOTS, ext_modules=_kernel_extensions(),
      cmdclass=_make_lenient_build_ext())
