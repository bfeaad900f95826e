"""`agentrl view`: terminal rendering and the self-contained HTML page."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.rollout.loop import rollout
from agentrl.trajectory.io import write_step
from agentrl.trajectory.testing import ScriptedEngine, ScriptedEnv, build_tokenizer, plain_vocab_ids


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("view")
    tok = build_tokenizer("chatml")
    tok.save_pretrained(tmp / "tok")
    engine = ScriptedEngine(plain_vocab_ids(tok), seed=1)
    result = rollout(engine, ScriptedEnv, tok, [0, 1], group_size=1, env_name="scripted")
    with_model = write_step(tmp, 1, result.trajectories, {"model": str(tmp / "tok")})
    without = write_step(tmp, 2, result.trajectories)
    return tmp, result.trajectories, with_model, without


def test_view_terminal_and_html(run) -> None:
    tmp, trajs, path, _ = run
    out = tmp / "ep.html"
    res = CliRunner().invoke(app, ["view", str(path), "--episode", "1", "--html", str(out)])
    assert res.exit_code == 0, res.output
    traj = trajs[1]
    flat = " ".join(res.output.split())
    assert f"{traj.num_sampled_tokens} trained tokens" in flat
    assert "Start:" in res.output and "turns" in res.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    assert len(re.findall(r"<span class='s' title=", page)) == traj.num_sampled_tokens
    assert len(re.findall(r"<span class='[sp]' title=", page)) == sum(len(s) for s in traj.samples)
    for turn in traj.turns:
        assert f"<td>{turn.reward:.3f}</td>" in page


def test_view_needs_a_tokenizer(run) -> None:
    tmp, _, path, without = run
    res = CliRunner().invoke(app, ["view", str(without)])
    assert res.exit_code != 0 and "--model" in res.output
    res = CliRunner().invoke(app, ["view", str(without), "--model", str(tmp / "tok")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["view", str(path), "--episode", "5"])
    assert res.exit_code != 0 and "episodes 0..1" in res.output
