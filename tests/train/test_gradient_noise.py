"""benchmarks/gradient_noise.py: its noise-scale estimates recover known values, and it reads
the trainer's and SFT's gradients without moving the weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from trainer_envs import VowelCount

from agentrl.envs import register

ROOT = Path(__file__).resolve().parents[2]
register("vowel-count", VowelCount)


@pytest.fixture(scope="module")
def gn(load_benchmark):
    return load_benchmark("gradient_noise")


def _synthetic(k: int, d: int, mean: float, std: float, seed: int = 0) -> np.ndarray:
    return mean + np.random.default_rng(seed).normal(0.0, std, (k, d))


def test_noise_scale_recovers_the_signal_and_noise_of_synthetic_gradients(gn) -> None:
    grads = _synthetic(400, 2000, mean=0.05, std=0.5)  # |G|^2 = 5, tr = 500
    s = gn.bootstrap(grads, batch_episodes=64, reps=100)
    assert s["signal_sq"] == pytest.approx(5.0, rel=0.1)
    assert s["noise_tr"] == pytest.approx(500.0, rel=0.02)
    assert s["b_noise"] == pytest.approx(64 * 100, rel=0.12)
    assert s["b_noise_p05"] < s["b_noise"] < s["b_noise_p95"]
    # pure noise: the unbiased |G|^2 is about 0 and B_noise unbounded or huge
    noise_only = gn.noise_stats(_synthetic(50, 2000, 0.0, 0.5), batch_episodes=64)
    assert abs(noise_only["signal_sq"]) < 3 * 0.25 * np.sqrt(2000) / 50 * 2
    assert (
        noise_only["b_noise"] > 64 * 100
        or noise_only["b_noise"] < 0
        or np.isinf(noise_only["b_noise"])
    )


def test_adam_scaling_lifts_the_noise_scale_where_small_gradients_are_all_noise(gn) -> None:
    rng = np.random.default_rng(1)
    # 100 coordinates carry signal; 1900 are pure noise 100 times smaller. SGD barely sees
    # the noisy ones; Adam gives every coordinate unit scale, so they swamp the signal.
    signal = 1.0 + rng.normal(0, 1.0, (200, 100))
    noise = rng.normal(0, 0.01, (200, 1900))
    grads = np.concatenate([signal, noise], axis=1)
    sgd = gn.noise_stats(grads, 64)["b_noise"]
    adam = gn.noise_stats(gn.adam_scaled(grads), 64)["b_noise"]
    assert sgd == pytest.approx(64 * 1.0, rel=0.3)
    assert adam > 10 * sgd


def test_expected_cosine_of_aligned_and_orthogonal_gradients(gn) -> None:
    a = _synthetic(300, 1000, 0.0, 0.3, seed=2)
    a[:, 0] += 2.0
    b = _synthetic(300, 1000, 0.0, 0.3, seed=3)
    b[:, 0] += 2.0
    c = _synthetic(300, 1000, 0.0, 0.3, seed=4)
    c[:, 1] += 2.0
    sq = {name: gn.noise_stats(g, 1)["signal_sq"] for name, g in (("a", a), ("b", b), ("c", c))}
    assert gn.expected_cosine(a, b, sq["a"], sq["b"]) == pytest.approx(1.0, abs=0.1)
    assert gn.expected_cosine(a, c, sq["a"], sq["c"]) == pytest.approx(0.0, abs=0.1)
    assert np.isnan(gn.expected_cosine(a, c, -1.0, sq["c"]))


def test_sft_gradients_are_read_without_a_step(gn, tiny_model_path) -> None:
    grads = gn.sft_gradients(str(tiny_model_path), batches=2, episodes=4)
    assert grads.shape[0] == 2 and np.isfinite(grads).all()
    assert not np.allclose(grads[0], grads[1])  # different solver episodes
    again = gn.sft_gradients(str(tiny_model_path), batches=1, episodes=4)
    np.testing.assert_allclose(again[0], grads[0], rtol=1e-5, atol=1e-8)  # same seeds


def test_rl_gradients_come_from_fresh_rollouts_and_leave_the_weights_alone(
    gn, tiny_model_path, monkeypatch
) -> None:
    import torch

    from agentrl.train import trainer as trainer_module

    seen = []
    original = trainer_module.Trainer.close

    def close(self):  # the weights after the reads are those loaded
        seen.append([p.detach().clone() for p in self.policy.model.parameters()])
        original(self)

    monkeypatch.setattr(trainer_module.Trainer, "close", close)
    overrides = ["trainer.num_groups=2", "rollout.group_size=8", "trainer.num_threads=1"]
    overrides += ["rollout.sampling.max_new_tokens=12"]
    grads, episodes, _ = gn.rl_gradients(str(tiny_model_path), 2, overrides, env="vowel-count")
    assert episodes == 16 and grads.shape == (2, grads.shape[1])
    assert not np.allclose(grads[0], grads[1])  # two rollouts, two gradients
    from agentrl.rollout.models import load_model

    loaded = load_model(str(tiny_model_path), dtype="float32")
    for after, before in zip(seen[0], loaded.parameters(), strict=True):
        torch.testing.assert_close(after, before.detach())


def test_line_search_directions_and_their_adam_scaling(gn) -> None:
    rng = np.random.default_rng(5)
    rl, sft = rng.normal(1.0, 1.0, (6, 50)), rng.normal(-2.0, 0.5, (6, 50))
    vectors = gn.summary_vectors(rl, sft)
    assert all(v.dtype == np.float32 for v in vectors.values())
    d = gn.directions_from(vectors, list(gn.DIRECTIONS))
    np.testing.assert_allclose(d["rl"], -rl.mean(0), rtol=1e-5)  # descent: minus the gradient
    np.testing.assert_allclose(d["rl-noise"], rl[0] - rl[1], rtol=1e-5)
    rms = np.sqrt((sft**2).mean(0))
    np.testing.assert_allclose(d["sft-adam"], -sft.mean(0) / rms, rtol=1e-4)
    assert d["random"].shape == (50,)
    with pytest.raises(SystemExit, match="unknown direction"):
        gn.directions_from(vectors, ["rl", "uphill"])


def test_a_zero_step_replays_the_start_exactly(gn) -> None:
    """The line search's comparisons are paired: the same seeds and sampling draws, so a step
    of length 0 changes no episode, and a long random step does."""
    from agentrl.rollout.models import load_model

    model = str(ROOT / "results" / "sokoban-rl" / "warm_start")  # the committed warm start
    size = sum(p.numel() for p in load_model(model).parameters())
    direction = np.random.default_rng(0).normal(size=size)
    rows = gn.line_search(model, {"random": direction}, [0.0, 200.0], 8, 1.0)
    assert [r["direction"] for r in rows] == ["start", "random", "random"]
    assert rows[0]["success"] > 0.5  # the warm start solves most rooms
    assert rows[1]["change"] == 0.0 and rows[1]["change_se"] == 0.0
    assert rows[2]["change"] < 0.0  # weights drowned in noise: the rooms are lost
