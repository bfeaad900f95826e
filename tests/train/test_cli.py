"""`agentrl train / eval / export / plot` smoke tests (tiny model, CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import yaml
from typer.testing import CliRunner

from agentrl.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """`agentrl train --env sokoban --model tiny --steps 2 --no-warm-start --preset grpo`
    (small groups; a preset that samples episodes, unlike Sokoban's default search)."""
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrl.cli",
            "train",
            "--env",
            "sokoban",
            "--model",
            "tiny",
            "--steps",
            "2",
            "--no-warm-start",
            "--preset",
            "grpo",
            "--set",
            "trainer.num_groups=2",
            "--set",
            "rollout.group_size=4",
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_train_writes_the_run_directory(trained_run) -> None:
    records = [json.loads(x) for x in (trained_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for key in (
        "reward/mean",
        "success_rate",
        "actor/entropy",
        "actor/grad_norm",
        "time/step",
        "reward/in_group_std",
        "throughput/gen_tokens_per_s",
        "collapse_warning",
    ):
        assert key in records[-1], key
    cfg = yaml.safe_load((trained_run / "config.yaml").read_text())
    assert cfg["env"]["name"] == "sokoban" and cfg["model"]["name"] == "tiny"
    assert cfg["algo"]["name"] == "grpo"  # the preset named
    assert list((trained_run / "tensorboard").glob("events.out.tfevents.*"))
    assert (trained_run / "trajectories" / "step_000002.jsonl").is_file()  # the rollout's name
    assert (trained_run / "checkpoints" / "step-000002" / "policy" / "model").is_dir()


def test_train_from_a_run_or_checkpoint_folder(trained_run, tmp_path) -> None:
    # Sokoban's default RL (focused expert iteration), on two rooms
    args = ["train", "--env", "sokoban", "--no-warm-start", "--steps", "1", "--set",
            "trainer.num_groups=2"]  # fmt: skip
    result = runner.invoke(
        app, [*args, "--model", str(trained_run), "--run-dir", str(tmp_path / "a")]
    )
    assert result.exit_code == 2  # a run holds several policies: which one is not guessed
    assert "agentrl export" in " ".join(result.output.split())
    checkpoint = max((trained_run / "checkpoints").iterdir())
    result = runner.invoke(
        app, [*args, "--model", str(checkpoint), "--run-dir", str(tmp_path / "b")]
    )
    assert result.exit_code == 0, result.output  # a checkpoint: its policy
    (record,) = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert record["search/hard_rooms"] + record["search/greedy_solved_frac"] * 2 == 2


def test_view_reads_the_trainers_trajectories(trained_run) -> None:
    """One trajectory format: `agentrl view` decodes what `agentrl train` wrote."""
    from agentrl.trajectory.io import read_trajectories

    path = trained_run / "trajectories" / "step_000001.jsonl"
    data = read_trajectories(path)
    assert data.metadata["model"] == "tiny" and data.metadata["step"] == 1
    assert data.trajectories and data.trajectories[0].env_name == "sokoban"
    html = trained_run / "episode.html"
    result = runner.invoke(app, ["view", str(path), "--episode", "0", "--html", str(html)])
    assert result.exit_code == 0, result.output
    assert "<span" in html.read_text()


def test_export_loads_in_transformers(trained_run, tmp_path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "export"
    result = runner.invoke(app, ["export", str(trained_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template
    from safetensors.torch import load_file

    saved = load_file(
        str(trained_run / "checkpoints" / "step-000002" / "policy" / "model" / "model.safetensors")
    )
    for key, value in saved.items():
        assert torch.equal(model.state_dict()[key], value), key
    again = runner.invoke(app, ["export", str(trained_run), "--out", str(out)])
    assert again.exit_code == 2 and "not empty" in again.output


@pytest.mark.vllm
@pytest.mark.slow
def test_export_loads_in_vllm(trained_run, tmp_path) -> None:
    """vLLM loads and serves the exported folder as it is written."""
    import asyncio

    from agentrl.rollout.engine import GenerationRequest, SamplingParams
    from agentrl.rollout.vllm_engine import VLLMEngine

    out = tmp_path / "export"
    assert runner.invoke(app, ["export", str(trained_run), "--out", str(out)]).exit_code == 0
    engine = VLLMEngine(str(out), dtype="float32", max_model_len=256, max_num_seqs=2)
    try:
        request = GenerationRequest([1, 2, 3], SamplingParams(max_new_tokens=4, ignore_eos=True))
        (completion,) = asyncio.run(engine.generate([request]))
    finally:
        engine.close()
    assert len(completion.token_ids) == 4 and all(lp <= 0.0 for lp in completion.logp)


def test_plot_writes_png(trained_run, tmp_path) -> None:
    out = tmp_path / "curves.png"
    result = runner.invoke(app, ["plot", str(trained_run), str(trained_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    missing = runner.invoke(app, ["plot", str(tmp_path), "--out", str(out)])
    assert missing.exit_code == 2 and "metrics.jsonl" in missing.output


def test_plot_usage_names_its_arguments() -> None:
    usage = " ".join(runner.invoke(app, ["plot", "--help"]).output.split())
    assert "agentrl plot [OPTIONS] {RUN_DIR}..." in usage and "{runs}" not in usage


def test_eval_reports_success_rate(trained_run) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            "--env",
            "sokoban",
            "--model",
            str(trained_run),
            "--episodes",
            "3",
            "--max-new-tokens",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "success rate" in result.output and "over 3 episodes" in result.output
    assert "seeds 1000000..1000002" in result.output


def test_config_errors_exit_2_naming_field_and_file(tmp_path) -> None:
    result = runner.invoke(app, ["train", "--set", "trainer.bogus=1", "--print-config"])
    assert result.exit_code == 2
    assert "trainer.bogus" in result.output and "Traceback" not in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim:\n  lr: fast\n")
    result = runner.invoke(app, ["train", "-c", str(bad), "--print-config"])
    assert result.exit_code == 2
    assert "optim.lr" in result.output and str(bad) in result.output and "'fast'" in result.output
    result = runner.invoke(app, ["train", "--preset", "nope", "--print-config"])
    assert result.exit_code == 2 and "starpo-s" in result.output


def test_print_config_layers_preset_file_flags_and_set(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("algo:\n  clip_eps_high: 0.3\ntrainer:\n  num_groups: 3\n")
    result = runner.invoke(
        app,
        [
            "train",
            "--env",
            "guess-number",
            "--preset",
            "starpo-s",
            "-c",
            str(path),
            "--steps",
            "5",
            "--set",
            "trainer.num_groups=6",
            "--backend",
            "fsdp2",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    cfg = yaml.safe_load(result.output)
    assert cfg["env"]["name"] == "guess-number"
    assert cfg["algo"]["filter_keep_ratio"] == 0.25  # from the preset
    assert cfg["algo"]["clip_eps_high"] == 0.3  # the file beats the preset
    assert cfg["trainer"]["num_steps"] == 5 and cfg["trainer"]["num_groups"] == 6
    assert cfg["trainer"]["backend"] == "fsdp2"
    assert cfg["model"]["name"] == "smollm2-135m"  # the CPU default


def test_config_error_header_lists_only_what_was_typed() -> None:
    args = ["train", "--env", "sokoban", "--steps", "1", "--no-warm-start"]
    result = runner.invoke(app, [*args, "--set", "trainer.bogus=1", "--print-config"])
    assert result.exit_code == 2
    header = result.output.splitlines()[0]
    assert header == (
        "error: invalid config (--env sokoban, --no-warm-start, --steps 1, --set trainer.bogus=1):"
    )


@pytest.mark.parametrize(
    ("args", "origin"),
    [
        (["--env", "sokobn"], "--env sokobn"),
        (["--set", "env.name=sokobn"], "--set env.name=sokobn"),
        (["-c", "run.yaml"], "env.name in run.yaml"),
    ],
)
def test_misspelled_env_writes_nothing_and_names_the_nearest(
    tmp_path, monkeypatch, args, origin
) -> None:
    """No run folder, not even under --run-dir; the nearest names and every known one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text("env:\n  name: sokobn\n")
    result = runner.invoke(app, ["train", *args, "--model", "tiny", "--steps", "1"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {origin}: unknown env 'sokobn'. Did you mean: sokoban")
    assert "tool-python" in result.output and "Traceback" not in result.output  # not cut off
    assert not (tmp_path / "runs").exists()
    named = tmp_path / "named"
    result = runner.invoke(app, ["train", *args, "--run-dir", str(named), "--steps", "1"])
    assert result.exit_code == 2 and not named.exists()
    result = runner.invoke(app, ["train", "--env", "no_such_module:Env", "--steps", "1"])
    assert result.exit_code == 2 and "no_such_module" in result.output
    assert not (tmp_path / "runs").exists()


def test_unknown_env_kwarg_fails_naming_it_and_the_env(tmp_path) -> None:
    result = runner.invoke(
        app,
        ["train", "--env", "math", "--model", "tiny", "--steps", "1", "--set", "env.generatr=x"]
        + ["--run-dir", str(tmp_path / "run")],
    )
    assert result.exit_code == 2, result.output
    assert "env 'math'" in result.output and "generatr" in result.output


def test_plot_draws_sft_metrics(tmp_path) -> None:
    """`agentrl plot` works on an `agentrl sft` output folder (its metrics are `sft/*`)."""
    import json

    from agentrl.train.plot import plot_runs

    run = tmp_path / "sft-run"
    run.mkdir()
    rows = [{"step": i, "sft/nll": 2.0 / (i + 1), "sft/token_accuracy": 0.1 * i} for i in range(4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = plot_runs([run], tmp_path / "sft.png")
    assert drawn == ["sft/nll", "sft/token_accuracy"]
    assert (tmp_path / "sft.png").stat().st_size > 1000


def test_plot_leaves_out_flat_curves_and_draws_what_is_asked(tmp_path) -> None:
    """By default a metric that never changes (a KL-free run's `actor/kl`) gets no panel and
    a search run's greedy success gets one; `--metric` draws exactly the keys named."""
    import json

    run = tmp_path / "search-run"
    run.mkdir()
    rows = [
        {"step": i, "actor/kl": 0.0, "search/greedy_solved_frac": 0.8 + 0.01 * i, "time/step": 9.0}
        for i in range(1, 5)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "c.png"
    result = runner.invoke(app, ["plot", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out} (search/greedy_solved_frac)" in " ".join(result.output.split())
    result = runner.invoke(
        app, ["plot", str(run), "--out", str(out), "-m", "actor/kl", "-m", "time/step"]
    )
    assert result.exit_code == 0 and "(actor/kl, time/step)" in result.output
    flat = tmp_path / "flat-run"
    flat.mkdir()
    (flat / "metrics.jsonl").write_text(json.dumps({"step": 1, "actor/kl": 0.0}) + "\n")
    result = runner.invoke(app, ["plot", str(flat), "--out", str(out)])
    assert result.exit_code == 0 and "(actor/kl)" in result.output  # all flat: drawn anyway
    result = runner.invoke(app, ["plot", str(run), "--out", str(out), "-m", "nope"])
    assert result.exit_code == 2 and "nope" in result.output
