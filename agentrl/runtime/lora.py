"""LoRA adapters (`trainer.lora`): wrap the policy, merge for the engines, save and load.

Every backend trains the same `peft` model that `apply_lora` builds; only the adapter
weights train. The backends gather the full state dict (peft names) as they do for a plain
model, and this module turns it into what the rest of agentrl reads:

    model = apply_lora(model, cfg.trainer.lora, base_model=cfg.model.name)
    scaling = lora_scaling(model)                    # alpha / r; None for a plain model
    weights = hf_weights(state, scaling)             # what the engines load: HF names, LoRA
                                                     # merged in, only the layers it changes
    save_weights(model, state, path, scaling)        # path/model (merged) + path/adapter

An adapter folder is peft's format (`adapter_config.json` + `adapter_model.safetensors`);
its `base_model_name_or_path` is the model name the run was given (an alias, a Hugging Face
id or an absolute path), so `merge_adapter_dir` finds the base through `resolve_model`;
`agentrl eval` loads an adapter through `loadable_model`, `agentrl export` merges it.

A run can also start from an adapter folder (`model.name`, e.g. a LoRA warm start): with
`trainer.lora` enabled the policy is the adapter's base with that adapter, trained on (so the
run's adapter names the same base); without it, the merged model trains in full
(`start_folders`, `start_adapter`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from agentrl.runtime.config import LoraConfig

ADAPTER_DIR = "adapter"
"""Sub-folder of a backend checkpoint with the LoRA adapter (peft format)."""
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_FILE = "adapter_model.safetensors"
_NAME = "default"
"""peft's adapter name: state-dict keys carry it (`lora_A.default.weight`), files do not."""


def _peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise RuntimeError("LoRA needs peft: pip install 'agentrl[peft]'") from e
    return peft


def base_model_name(name: str) -> str:
    """The base model as an adapter folder records it: an alias or Hugging Face id as given,
    a local folder as an absolute path (so it resolves from any working directory)."""
    path = Path(name).expanduser()
    return str(path.resolve()) if path.is_dir() else name


def apply_lora(model: nn.Module, cfg: LoraConfig, *, base_model: str) -> nn.Module:
    """Wrap `model` with peft LoRA adapters on `cfg.target_modules` (only they train).

    `base_model` (the run's `model.name`) goes into the adapter's `adapter_config.json`.
    Adapters go on `nn.Linear` layers only: that is what `merge_lora` merges.
    """
    peft = _peft()
    lora = peft.LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=0.0,  # see LoraConfig
        target_modules=list(cfg.target_modules),
        bias="none",
    )
    wrapped = peft.get_peft_model(model, lora)
    wrapped.peft_config[_NAME].base_model_name_or_path = base_model_name(base_model)
    for name, module in wrapped.named_modules():
        if isinstance(module, peft.tuners.lora.LoraLayer):
            base = module.get_base_layer()
            if type(base) is not nn.Linear:
                raise ValueError(
                    f"trainer.lora.target_modules: {name} is a {type(base).__name__}; "
                    "agentrl trains LoRA on nn.Linear layers only"
                )
    return wrapped


def start_adapter(name: str, lora: LoraConfig | None) -> Path | None:
    """The adapter folder a policy with `lora` continues: `name` when it is one and `lora` is
    enabled, else None (the policy then gets fresh adapters, or none)."""
    if lora is None or not lora.enabled or not is_adapter_dir(name):
        return None
    return Path(name)


def load_start_adapter(model: nn.Module, path: Path, cfg: LoraConfig) -> None:
    """Copy the weights of the adapter folder `path` into the adapters `apply_lora` put on
    `model` with `cfg`; ValueError when the folder was trained with another rank, alpha or
    target modules."""
    saved = json.loads((Path(path) / ADAPTER_CONFIG).read_text())
    mine = {"r": cfg.r, "lora_alpha": cfg.alpha, "target_modules": sorted(cfg.target_modules)}
    theirs = {
        "r": saved.get("r"),
        "lora_alpha": saved.get("lora_alpha"),
        "target_modules": sorted(saved.get("target_modules") or []),
    }
    if mine != theirs:
        raise ValueError(
            f"model.name {path} is a LoRA adapter with r {theirs['r']}, alpha "
            f"{theirs['lora_alpha']}, target modules {theirs['target_modules']}; the run's "
            f"trainer.lora has r {cfg.r}, alpha {cfg.alpha}, target modules "
            f"{mine['target_modules']}: set trainer.lora to the adapter's, or disable it to "
            "train the merged model in full"
        )
    model.load_state_dict(read_adapter(path, model.state_dict().keys()), strict=False)


def lora_scaling(model: nn.Module) -> float | None:
    """`alpha / r` of a model `apply_lora` wrapped (before any backend wraps it further);
    None for a plain model."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or _NAME not in configs:
        return None
    return float(configs[_NAME].lora_alpha / configs[_NAME].r)


def merge_lora(state: Mapping[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The full state dict of a LoRA model (peft names) as the plain model's: each adapted
    weight `W + scaling * B @ A` (as peft's `merge_adapter` computes it), Hugging Face names,
    no `lora_` keys. The tensors not merged are the ones in `state`.

    >>> A, B, W = torch.ones(1, 2), torch.full((2, 1), 0.5), torch.zeros(2, 2)
    >>> merged = merge_lora({
    ...     "base_model.model.fc.base_layer.weight": W,
    ...     "base_model.model.fc.lora_A.default.weight": A,
    ...     "base_model.model.fc.lora_B.default.weight": B,
    ... }, scaling=2.0)
    >>> merged["fc.weight"].tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    merged: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        if key.endswith(".base_layer.weight"):
            prefix = key.removesuffix(".base_layer.weight")
            lora_a = state[f"{prefix}.lora_A.{_NAME}.weight"]  # [r, in]
            lora_b = state[f"{prefix}.lora_B.{_NAME}.weight"]  # [out, r]
            value = value + (lora_b @ lora_a) * scaling
        merged[key.removeprefix("base_model.model.").replace(".base_layer.", ".")] = value
    return merged


def changed_by_lora(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The part of a LoRA model's full state dict (peft names) that its adapters change once
    merged: every tensor of each module holding an adapted layer (`self_attn` for the default
    `q_proj`, `k_proj`, `v_proj`, `o_proj`), adapters included. The siblings come along
    because vLLM fuses them (`q_proj`, `k_proj` and `v_proj` into one `qkv_proj`) and reloads
    a fused layer only whole.

    >>> state = {f"base_model.model.{k}": torch.zeros(1) for k in (
    ...     "embed.weight", "attn.q.base_layer.weight", "attn.q.lora_A.default.weight",
    ...     "attn.q.lora_B.default.weight", "attn.k.weight", "mlp.up.weight")}
    >>> sorted(k.removeprefix("base_model.model.") for k in changed_by_lora(state))
    ['attn.k.weight', 'attn.q.base_layer.weight', 'attn.q.lora_A.default.weight', 'attn.q.lora_B.default.weight']
    """
    parents = {
        key.removesuffix(".base_layer.weight").rpartition(".")[0] + "."
        for key in state
        if key.endswith(".base_layer.weight")
    }
    return {k: v for k, v in state.items() if any(k.startswith(p) for p in parents)}


def hf_weights(
    state: Mapping[str, torch.Tensor], scaling: float | None
) -> Mapping[str, torch.Tensor]:
    """A gathered full state dict as the engines load it: `state` itself for a plain model
    (`scaling` None) or an empty one (ranks other than 0); for a LoRA model only the layers
    its adapters change, merged (`merge_lora(changed_by_lora(state), scaling)`): the engine's
    other weights are the base model's, which LoRA never trains. For SmolLM2-135M with the
    default targets that is 27 M of its 135 M weights, and a vLLM sync of them took 0.2 s
    against 1.7-3.1 s for all of them (benchmarks/lora_sync.py)."""
    if scaling is None or not state:
        return state
    return merge_lora(changed_by_lora(state), scaling)


def adapter_tensors(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter weights of a full state dict (peft names), named as peft's files name
    them (without the adapter name)."""
    return {_file_key(k): v for k, v in state.items() if ".lora_" in k}


def _file_key(key: str) -> str:
    return key.replace(f".{_NAME}.", ".")


def write_adapter(model: nn.Module, state: Mapping[str, torch.Tensor], path: Path) -> None:
    """Write the adapter of `model` (its config) with the weights in `state` (the gathered
    full state dict) as a peft adapter folder `path`."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = copy.copy(model.peft_config[_NAME])
    config.inference_mode = True  # as peft's save_pretrained writes it
    config.save_pretrained(str(path))
    tensors = {k: v.contiguous() for k, v in adapter_tensors(state).items()}
    save_file(tensors, str(path / ADAPTER_FILE), metadata={"format": "pt"})


def read_adapter(path: Path, model_keys: Iterable[str]) -> dict[str, torch.Tensor]:
    """The weights of the adapter folder `path`, under the model's state-dict names
    (`model_keys`: every key of the LoRA model's state dict); the sets must match."""
    from safetensors.torch import load_file

    saved = load_file(str(Path(path) / ADAPTER_FILE))
    wanted = {_file_key(k): k for k in model_keys if ".lora_" in k}
    missing, unexpected = set(wanted) - set(saved), set(saved) - set(wanted)
    if missing or unexpected:
        raise RuntimeError(
            f"the adapter in {path} does not match the model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(unexpected)[:3]} (other trainer.lora settings?)"
        )
    return {wanted[k]: v for k, v in saved.items()}


def save_weights(
    model: nn.Module, state: Mapping[str, torch.Tensor], path: Path, scaling: float | None
) -> None:
    """Write the gathered full state dict `state` of `model` as the Hugging Face folder
    `path/model`; for a LoRA model merged, with the adapter alone in `path/adapter`."""
    from agentrl.runtime._dist import MODEL_DIR, save_hf

    path = Path(path)
    if scaling is None:
        save_hf(model, state, path / MODEL_DIR)
        return
    write_adapter(model, state, path / ADAPTER_DIR)
    save_hf(model.get_base_model(), merge_lora(state, scaling), path / MODEL_DIR)


# -- adapter folders for eval and export -------------------------------------------------------
def is_adapter_dir(path: str | Path) -> bool:
    """Whether `path` is a peft adapter folder (has `adapter_config.json`)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(path: str | Path) -> str:
    """The base model an adapter folder names (`base_model_name_or_path`)."""
    config_file = Path(path) / ADAPTER_CONFIG
    name = json.loads(config_file.read_text()).get("base_model_name_or_path")
    if not name:
        raise ValueError(f"{config_file} names no base model (base_model_name_or_path)")
    return str(name)


def merge_adapter_dir(adapter: str | Path, out: str | Path) -> Path:
    """Write the adapter folder `adapter` merged into its base model as a Hugging Face
    model folder `out` (fp32 weights, the base's tokenizer); returns `out`.

    The base is found with `resolve_model` (alias, Hugging Face id or local folder).
    """
    from transformers import AutoTokenizer

    from agentrl.rollout.models import ModelNotFoundError, load_model, resolve_model
    from agentrl.runtime._dist import save_hf

    peft = _peft()
    adapter, out = Path(adapter), Path(out)
    name = adapter_base(adapter)
    try:
        base_dir = resolve_model(name)
    except ModelNotFoundError as e:
        raise ModelNotFoundError(
            f"{adapter}: its base model {name!r} (base_model_name_or_path in {ADAPTER_CONFIG}) "
            f"cannot be loaded: {e}"
        ) from e
    model = load_model(str(base_dir), dtype="float32")
    merged = peft.PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    save_hf(merged, merged.state_dict(), out)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out)
    return out


@contextlib.contextmanager
def start_folders(name: str, lora: LoraConfig | None) -> Iterator[tuple[Path, Path]]:
    """The folders a run that starts from the model `name` loads: the model it starts as
    (engines, tokenizer, reference; an adapter merged into its base in a temporary folder,
    deleted on exit), and the policy's weights (the adapter's base when the policy continues
    that adapter: `start_adapter`)."""
    from agentrl.rollout.models import resolve_model

    with loadable_model(name) as folder:
        if start_adapter(name, lora) is None:
            yield folder, folder
        else:
            yield folder, resolve_model(adapter_base(name))


@contextlib.contextmanager
def loadable_model(name: str) -> Iterator[Path]:
    """The Hugging Face folder to load for the model `name` (`resolve_model`), or for a LoRA
    adapter folder a temporary folder with the adapter merged into its base, deleted on exit
    (the hf and vllm engines then load plain weights)."""
    from agentrl.rollout.models import resolve_model

    if not is_adapter_dir(name):
        yield resolve_model(name)
        return
    with tempfile.TemporaryDirectory(prefix="agentrl-lora-merged-") as tmp:
        yield merge_adapter_dir(name, Path(tmp) / "model")
