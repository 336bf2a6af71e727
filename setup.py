"""Builds the ferry Python package: ferry/ (python/ferry) and its C extension
ferry._ferry, one .abi3.so for CPython 3.11 and later, which the project's CMake
builds with the library linked in. Offline, from a checkout:

    /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-build-isolation .
"""
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "include", "ferry", "core.h")) as f:
        return re.search(r'#define FERRY_VERSION_STRING "([^"]+)"', f.read()).group(1)


class CMakeBuild(build_ext):
    """Runs the project's CMake for the two targets the package needs: the
    extension, and the `ferry` command (linked on its own, run by the console
    entry point ferry._cli, so that `pip install` gives the command too)."""

    def build_extension(self, ext):
        build = os.path.join(os.path.abspath(self.build_temp), "cmake")
        subprocess.check_call([
            "cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DFERRY_PYTHON=ON",
            "-DFERRY_BUILD_TESTS=OFF", "-DFERRY_BUILD_CLI=ON", "-DFERRY_CLI_STATIC=ON",
            "-DPython3_EXECUTABLE=" + sys.executable])
        subprocess.check_call(["cmake", "--build", build, "--target", "ferry_python", "ferry_cli",
                               "-j", str(os.cpu_count() or 2)])
        out = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copyfile(os.path.join(build, "_ferry.abi3.so"), out)
        cli = os.path.join(os.path.dirname(out), "_bin", "ferry")
        os.makedirs(os.path.dirname(cli), exist_ok=True)
        shutil.copyfile(os.path.join(build, "ferry"), cli)
        os.chmod(cli, 0o755)


setup(
    name="ferry",
    version=version(),
    description="A data loader for training, with its core in C",
    packages=["ferry"],
    package_dir={"": "python"},
    package_data={"ferry": ["py.typed", "*.pyi"]},
    ext_modules=[Extension("ferry._ferry", sources=[], py_limited_api=True)],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["ferry = ferry._cli:main"]},
    python_requires=">=3.11",
    options={"bdist_wheel": {"py_limited_api": "cp311"}, "build": {"build_base": "build/python"}},
)
