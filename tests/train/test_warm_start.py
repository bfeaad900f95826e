"""`warm_start`: `agentrl train` fine-tunes on the env's expert first, then RL starts there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.rollout.models import load_model
from agentrl.train.checkpoint import model_dir

runner = CliRunner()

WARM = [
    "--set",
    "warm_start.expert=solver",
    "--set",
    "warm_start.num_episodes=8",
    "--set",
    "warm_start.batch_size=4",
    "--set",
    "warm_start.max_actions_per_turn=1",
    "--set",
    "env.max_turns=10",  # one action per turn: the whole 10-action budget
    "--set",
    "logging.progress=false",
    "--set",
    "trainer.num_threads=1",
    "--set",
    "trainer.num_groups=2",  # Sokoban's default RL (a search) on two rooms a step
    "--set",
    "optim.lr=1e-5",  # its 28 optimizer steps a step stay near the warm start (checked below)
]


def _distance(a: Path | str, b: Path | str) -> float:
    pa = dict(load_model(str(a)).named_parameters())
    pb = dict(load_model(str(b)).named_parameters())
    return sum(float((pa[k] - pb[k]).detach().norm()) for k in pa)


def test_train_warm_starts_then_resume_reuses_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["train", "--env", "sokoban", "--model", "tiny", "--steps", "1"]
    result = runner.invoke(app, [*args, "--run-dir", str(run_dir), *WARM])
    assert result.exit_code == 0, result.output
    ws = run_dir / "warm_start"
    summary = json.loads((ws / "sft_result.json").read_text())
    assert summary["num_trajectories"] == 8
    assert summary["expert_success_rate"] == 1.0
    assert summary["final_nll"] < summary["initial_nll"]
    # RL started from the fine-tuned weights, not from the alias's random ones.
    policy = model_dir(run_dir)
    assert _distance(policy, ws) < 0.1 * _distance(policy, "tiny")
    stamp = (ws / "sft_result.json").stat().st_mtime_ns

    resumed = runner.invoke(app, ["train", "--resume", str(run_dir), "--steps", "2"])
    assert resumed.exit_code == 0, resumed.output
    assert (ws / "sft_result.json").stat().st_mtime_ns == stamp  # not trained again
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines][-1] == 2

    # `agentrl eval` on the run plays it as trained: its env kwargs, one sample per turn.
    scored = runner.invoke(app, ["eval", "--model", str(run_dir), "--episodes", "2"])
    assert scored.exit_code == 0, scored.output
    first = scored.output.splitlines()[0]
    assert "env sokoban(max_turns=10), max_turns 10, history_turns 0" in first
    assert "over 2 episodes" in scored.output


def test_warm_start_section_in_the_config(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train", "--print-config", *WARM])
    assert result.exit_code == 0, result.output
    assert "expert: solver" in result.output
    bad = runner.invoke(app, ["train", "--print-config", "--set", "warm_start.optim.lr=0"])
    assert bad.exit_code == 2
    assert "warm_start.optim.lr" in bad.output


def test_warm_start_takes_the_sft_keys_unrenamed() -> None:
    """`warm_start` nests `agentrl sft`'s keys; an old name is reported with the new one."""
    from agentrl.cli.warm_start import sft_config
    from agentrl.config import ConfigError, load_config

    overrides = [*WARM[1::2], "warm_start.optim.cycles=4", "warm_start.optim.lr=5e-4"]
    cfg = load_config(overrides=overrides)
    sft = sft_config(cfg)
    assert (sft.optim.lr, sft.optim.cycles) == (5e-4, 4)
    assert (sft.optim.schedule, sft.optim.warmup_steps, sft.optim.min_lr_ratio) == (
        "cosine",
        10,
        0.1,
    )
    assert (sft.num_episodes, sft.batch_size, sft.max_actions_per_turn) == (8, 4, 1)
    for old, new in [("lr", "optim.lr"), ("lr_cycles", "optim.cycles")]:
        with pytest.raises(ConfigError, match=f"warm_start.{old}: unknown key .*warm_start.{new}"):
            load_config(overrides=[f"warm_start.{old}=1"])


def test_logits_only_where_the_loss_is() -> None:
    """`masked_nll` keeps logits at loss positions only; the NLL equals the full computation."""
    import functools

    from agentrl.algos.losses import token_logprobs_from_logits
    from agentrl.envs import make
    from agentrl.rollout.models import load_tokenizer
    from agentrl.runtime.batch import to_batch
    from agentrl.sft.data import expert_trajectories
    from agentrl.sft.expert import get_expert
    from agentrl.sft.train import masked_nll

    tok = load_tokenizer("tiny")
    model = load_model("tiny", dtype="float32")
    factory = functools.partial(make, "sokoban")
    trajs = expert_trajectories(
        factory, tok, range(4), get_expert("solver"), max_actions_per_turn=1
    )
    batch = to_batch(trajs, pad_id=tok.pad_token_id)
    nll, correct = masked_nll(model, batch)
    with torch.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logits = logits[:, :-1]
    targets, mask = batch.input_ids[:, 1:], batch.loss_mask[:, 1:]
    full = -(token_logprobs_from_logits(logits, targets) * mask).sum()
    hits = ((logits.argmax(-1) == targets).float() * mask).sum()
    assert torch.allclose(nll.detach(), full, rtol=1e-5)
    assert float(correct) == float(hits)


def test_a_lora_run_warm_starts_an_adapter_and_trains_it_on(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    from agentrl.runtime.lora import adapter_base, is_adapter_dir
    from agentrl.train.checkpoint import latest_checkpoint

    run_dir = tmp_path / "run"
    lora = ["--set", "trainer.lora.enabled=true", "--set", "trainer.lora.r=4"]
    args = ["train", "--env", "sokoban", "--model", "tiny", "--steps", "1", *lora]
    result = runner.invoke(app, [*args, "--run-dir", str(run_dir), *WARM, "--set", "optim.lr=1e-3"])
    assert result.exit_code == 0, result.output
    ws = run_dir / "warm_start"
    assert is_adapter_dir(ws) and adapter_base(ws) == "tiny"  # a LoRA SFT
    adapter = latest_checkpoint(run_dir) / "policy" / "adapter"
    assert adapter_base(adapter) == "tiny"  # RL trained the same adapter over the same base
    start, end = (
        load_file(str(ws / "adapter_model.safetensors")),
        load_file(str(adapter / "adapter_model.safetensors")),
    )
    assert start.keys() == end.keys()
    assert any(not torch.equal(start[k], end[k]) for k in start)
    scored = runner.invoke(app, ["eval", "--model", str(ws), "--episodes", "2"])
    assert scored.exit_code == 0, scored.output
    assert "over 2 episodes" in scored.output
