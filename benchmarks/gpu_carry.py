"""The Python packages benchmarks/gpu_check.sh needs on a lent GPU machine that its image lacks.

    .venv/bin/python benchmarks/gpu_carry.py build [--out .gpu_carry]   # -> site.zip, data.tar.xz
    .venv/bin/python benchmarks/gpu_carry.py check IMPORTED_FILE        # is anything imported missing?

The device machine (its Python 3.12, torch with CUDA, nothing reachable outside it) has the packages
of DEVICE_HAS (read off the device tool's KINDS.md, 2026-11-17). `build` downloads, for Python 3.12
on x86-64 Linux, the versions this environment has of CARRY (this repo's dependencies that the image
lacks, and those whose version should be ours rather than the image's), unpacks them into OUT/site
and zips that (OUT/site.zip: 28 MB, where the unpacked 95 MiB would not travel), and packs the part
of data/ the check reads (OUT/data.tar.xz). The device command (DEVICE_COMMAND) unpacks both and
puts the site first on PYTHONPATH. bitsandbytes keeps only its CPU and
CUDA 13.0 libraries (the image's torch is cu130): the whole wheel is 43 MB of the call's 64 MiB.
`check` reads the distributions a rehearsal imported (benchmarks/gpu_peak.py writes them with
ESC_IMPORTED_DISTRIBUTIONS) and names those neither on the image nor carried: exit 1 if any.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# pip names of the device image's packages (KINDS.md, "Python packages already there")
DEVICE_HAS = set(
    """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
    build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
    cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops
    equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch
    grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio iniconfig
    interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
    lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
    markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
    multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
    nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft
    nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
    nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
    onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
    packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
    protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions
    pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil
    pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
    scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
    sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore
    threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric
    torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect
    urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp""".split()
)

# What travels: the repo's runtime needs that the image lacks (hydra, datasets, openai, DeepSpeed,
# bitsandbytes and what they require), and transformers/peft/huggingface-hub at this environment's
# versions (the image's transformers is older than the one `make install` resolves).
CARRY = (
    "hydra-core", "omegaconf", "antlr4-python3-runtime",
    "datasets", "dill", "multiprocess",
    "openai", "jiter", "sniffio", "httpx2", "httpcore2", "truststore",
    "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
    "deepspeed", "hjson",
    "bitsandbytes",
    "transformers", "peft", "huggingface-hub",
    "regex", "typing-extensions",  # transformers checks regex >= 2025.10.22 at import; pydantic's floor
)  # fmt: skip
# imported on a CPU only through the namespace package hydra_plugins they share; Hydra runs without
# them unless a config picks their launcher or sweeper (the check's configs do not)
NOT_NEEDED = ("hydra-optuna-sweeper", "hydra-submitit-launcher")
BUILD_FROM_SOURCE = ("antlr4-python3-runtime", "deepspeed")  # PyPI has no wheel of these versions
# what the check reads of data/ (the cards, the training mixture, the tiny tokenizer's corpus, the
# ESConv annotation set): 48 MB, 6 MB as tar.xz; all of data/ (53 MB) would not travel beside the site
DATA = ("README.md", "checksums", "esc_eval", "esconv", "smile", "roleplay", "annotations")
DEVICE_COMMAND = (
    "python3 -m zipfile -e .gpu_carry/site.zip /tmp/site && "
    "python3 -c \"import tarfile; tarfile.open('.gpu_carry/data.tar.xz').extractall(filter='data')\" && "
    "PYTHONPATH=/tmp/site GPU_CHECK_RUNS=/tmp/gpu_check_runs PYTHON=python3 bash benchmarks/gpu_check.sh"
)
BNB_KEEP = re.compile(r"libbitsandbytes_(cpu|cuda130)\.so$")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def fetch(name: str, ver: str, wheels: Path) -> Path:
    """A wheel of name==ver for CPython 3.12 on x86-64 Linux in `wheels`."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    before = set(wheels.iterdir())
    if name in BUILD_FROM_SOURCE:  # pure Python: a wheel built here serves any Python 3
        cmd = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), f"{name}=={ver}"]
    else:
        cmd = [*pip, "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(wheels),
               f"{name}=={ver}"]  # fmt: skip
    subprocess.run(cmd, check=True)
    new = [p for p in set(wheels.iterdir()) - before if p.suffix == ".whl"]
    if not new:  # already there from an earlier build
        new = [p for p in wheels.glob("*.whl")
               if normal(p.name.split("-")[0]) == normal(name) and p.name.split("-")[1] == ver]  # fmt: skip
    return new[0]


def unpack(wheel: Path, site: Path) -> int:
    """Unzip a wheel into `site` as pip would place it (bitsandbytes without the other CUDA
    versions' libraries); the bytes written."""
    written = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if "bitsandbytes/libbitsandbytes_" in info.filename and not BNB_KEEP.search(info.filename):
                continue
            zf.extract(info, site)
            written += info.file_size
    return written


def build(args: argparse.Namespace) -> int:
    out = Path(args.out)
    wheels, site = out / "wheels", out / "site"
    shutil.rmtree(site, ignore_errors=True)
    wheels.mkdir(parents=True, exist_ok=True)
    site.mkdir(parents=True)
    total = 0
    for name in CARRY:
        ver = installed(name)
        if ver is None:
            print(f"error: {name} is not installed here: run `make install` first")
            return 2
        size = unpack(fetch(name, ver, wheels), site)
        total += size
        print(f"{name}=={ver}: {size / 2**20:.1f} MiB")
    print(f"{len(CARRY)} distributions, {total / 2**20:.1f} MiB unpacked in {site}")
    archive = Path(shutil.make_archive(str(out / "site"), "zip", site))
    print(f"{archive}: {archive.stat().st_size / 2**20:.1f} MiB")
    data = out / "data.tar.xz"
    with tarfile.open(data, "w:xz") as tar:
        for part in DATA:
            tar.add(Path("data") / part)
    print(f"{data}: {data.stat().st_size / 2**20:.1f} MiB ({', '.join(DATA)} of data/)")
    print("on the device machine, from the repository root, carrying those two files:\n  " + DEVICE_COMMAND)
    return 0


def check(args: argparse.Namespace) -> int:
    lines = {line.strip() for line in Path(args.imported).read_text().splitlines() if line.strip()}
    covered = {normal(n) for n in DEVICE_HAS | set(CARRY) | set(NOT_NEEDED)} | {"esc-eval"}
    # a line is one module's owners, "a|b" for a namespace package: any one of them provides it
    missing = sorted(line for line in lines if not any(normal(d) in covered for d in line.split("|")))
    print(f"{len(lines)} modules' distributions imported; neither on the device image nor carried: "
          f"{', '.join(missing) or 'none'}")  # fmt: skip
    return 1 if missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("build")
    p.add_argument("--out", default=".gpu_carry")
    p.set_defaults(run=build)
    p = sub.add_parser("check")
    p.add_argument("imported")
    p.set_defaults(run=check)
    args = parser.parse_args()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
