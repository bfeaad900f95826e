"""An algorithm defined outside the package: REINFORCE with the batch's mean return as its
baseline, registered from this file, trains 2 steps and is pinned; `algo.name:
module.path:Class` works without registering."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from trainer_envs import VowelCount

from agentrl.algos import Algorithm, algorithm_class, register_algorithm
from agentrl.algos.config import AlgoConfig
from agentrl.config import ConfigError, load_config
from agentrl.envs import register
from agentrl.train.trainer import Trainer

register("vowel-count", VowelCount)


def mean_baseline(algo: AlgoConfig, r) -> tuple[torch.Tensor, None]:
    """Each trajectory's return less the batch's mean return, on all its trained tokens."""
    returns = r.token_rewards.sum(-1)  # [N]
    return (returns - returns.mean()).unsqueeze(-1) * r.loss_mask, None


@register_algorithm("reinforce-mean")
class ReinforceMean(Algorithm):
    """REINFORCE with a mean baseline: one optimizer step a rollout, so the clip never acts."""

    estimate = staticmethod(mean_baseline)


def _config(*overrides: str, name: str = "reinforce-mean"):
    return load_config(
        overrides=[
            f"algo.name={name}",
            "algo.kl_coef=0",
            "env.name=vowel-count",
            "model.name=tiny",
            "rollout.group_size=4",
            "rollout.sampling.max_new_tokens=12",
            "trainer.num_groups=4",
            "trainer.micro_batch_tokens=256",
            "trainer.num_steps=2",
            "trainer.num_threads=1",
            "optim.lr=1e-3",
            "checkpoint.every=0",
            "eval.every=0",
            "logging.progress=false",
            "logging.tensorboard=false",
            "logging.save_trajectories=0",
            *overrides,
        ]
    )


def test_a_user_algorithm_trains_and_is_pinned(tmp_path: Path) -> None:
    cfg = _config()
    trainer = Trainer(cfg, tmp_path)
    try:
        assert type(trainer.algo) is ReinforceMean
        steps = [trainer.train_step() for _ in range(cfg.trainer.num_steps)]
    finally:
        trainer.close()
    got = [(m["reward/mean"], m["advantage/advantage_abs_mean"]) for m in steps]
    assert got == [pytest.approx(p, rel=1e-5, abs=1e-7) for p in PINNED], got
    assert all(m["actor/clip_frac"] == 0.0 for m in steps)


PINNED = [(0.780681, 0.081643), (0.811004, 0.062823)]
"""`(reward/mean, advantage/advantage_abs_mean)` of the two steps."""


def test_its_keys_are_its_own_and_the_did_you_mean_names_it() -> None:
    with pytest.raises(ConfigError, match=r"algo.lam = 0.5 does nothing with algo.name: reinf"):
        _config("algo.lam=0.5")
    assert (
        algorithm_class("reinforce-mean") is ReinforceMean
        and ReinforceMean.name == "reinforce-mean"
    )


def test_a_class_named_by_its_module_path(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "my_algos.py").write_text(
        "from agentrl.algos import Algorithm\n"
        "from agentrl.algos.config import COMMON_KEYS\n"
        "from agentrl.algos.imitation import imitation_estimate\n"
        "class Imitate(Algorithm):\n"
        "    config_keys = COMMON_KEYS\n"
        "    imitation = True\n"
        "    estimate = staticmethod(imitation_estimate)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _config(name="my_algos:Imitate")
    assert cfg.algo.imitation and not cfg.algo.clips
    with pytest.raises(ConfigError, match="clip_eps_high"):  # not one of its keys
        _config("algo.clip_eps_high=0.3", name="my_algos:Imitate")
    with pytest.raises(ConfigError, match="cannot import"):
        _config(name="my_algos:Missing")
    sys.modules.pop("my_algos", None)


def test_registering_checks_the_class() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_algorithm("grpo")(ReinforceMean)
    with pytest.raises(ValueError, match="not algo keys"):

        @register_algorithm("bad-keys")
        class BadKeys(Algorithm):
            config_keys = frozenset({"lr"})
