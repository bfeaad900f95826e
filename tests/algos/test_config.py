"""AlgoConfig validation, derived properties, and the shipped presets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentrl.algos.base import ALGORITHMS, algorithm_class
from agentrl.algos.config import AlgoConfig, algo_keys
from agentrl.algos.presets import (
    UnknownPresetError,
    list_presets,
    load_preset,
    preset_algo_config,
)

BUILT_IN = ("grpo", "rloo", "reinforce++", "ppo", "gigpo", "rft", "expert-iteration")


def test_config_keys_snapshot() -> None:
    # New keys must show up in review: update this list together with docs/algorithms.md.
    assert sorted(AlgoConfig.model_fields) == sorted(
        [
            "name", "reward_level", "gamma", "lam", "turn_gamma", "scale_by_std",
            "clip_eps_low", "clip_eps_high", "dual_clip_c", "loss_agg", "kl_coef", "kl_kind",
            "entropy_coef", "value_clip_eps", "filter_keep_ratio", "filter_min_std",
            "tis_cap", "ppo_epochs", "num_mini_batches", "std_floor", "critic_warmup_steps",
            "step_weight", "search_beam", "search_easy_keep", "search_label_tau",
        ]
    )  # fmt: skip
    for name, field in AlgoConfig.model_fields.items():
        assert field.description, f"AlgoConfig.{name} has no docstring"


def test_unknown_keys_and_bad_values_are_errors() -> None:
    with pytest.raises(ValidationError, match="clip_eps_hihg"):
        AlgoConfig(clip_eps_hihg=0.3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="dual_clip_c"):
        AlgoConfig(dual_clip_c=0.5)
    with pytest.raises(ValidationError, match="turn-gae"):
        AlgoConfig(name="turn-gae")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="name"):
        AlgoConfig(name="ddpg")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="estimator"):
        AlgoConfig(estimator="gae")  # type: ignore[call-arg]


def test_derived_properties() -> None:
    # capabilities come from the algorithm's class, not from its name
    assert AlgoConfig(name="ppo").use_critic
    assert not AlgoConfig(name="grpo").use_critic
    assert AlgoConfig(name="rft").imitation and not AlgoConfig(name="rloo").imitation
    assert not AlgoConfig(kl_coef=0.0).use_reference
    cfg = AlgoConfig(kl_coef=0.01, kl_kind="k1")  # k1 goes into the reward
    assert cfg.use_reference and cfg.kl_in_reward and not cfg.use_kl_loss
    for kind in ("k2", "k3"):  # k2, k3 into the loss
        cfg = AlgoConfig(kl_coef=0.01, kl_kind=kind)
        assert cfg.use_kl_loss and not cfg.kl_in_reward
    assert AlgoConfig(name="ppo").normalize_rewards and not AlgoConfig().normalize_rewards
    assert not AlgoConfig().clips and AlgoConfig(num_mini_batches=2).clips
    assert AlgoConfig(ppo_epochs=2).clips
    assert not AlgoConfig(name="expert-iteration", num_mini_batches=2).clips


def test_the_built_in_algorithms_are_registered() -> None:
    for name in BUILT_IN:
        assert algorithm_class(name).name == name
    assert set(BUILT_IN) <= set(ALGORITHMS)


def test_validating_a_config_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from agentrl.algos.config import AlgoConfig\n"
        "for n in ('grpo', 'ppo', 'rft', 'expert-iteration'): AlgoConfig(name=n)\n"
        "AlgoConfig(name='gigpo', reward_level='turn')\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


@pytest.mark.parametrize(
    ("key", "value", "owner"),
    [
        ("search_beam", 4, "expert-iteration"),
        ("search_easy_keep", 0.5, "expert-iteration"),
        ("search_label_tau", 0.1, "expert-iteration"),
        ("critic_warmup_steps", 2, "ppo"),
    ],
)
def test_keys_of_one_algorithm_are_rejected_elsewhere(key, value, owner) -> None:
    with pytest.raises(ValueError, match=f"algo.{key}"):
        AlgoConfig(name="grpo", **{key: value})
    assert getattr(AlgoConfig(name=owner, **{key: value}), key) == value


def test_a_key_the_algorithm_does_not_read_names_what_it_reads() -> None:
    with pytest.raises(ValueError, match="algo.lam") as err:
        AlgoConfig(name="grpo", lam=0.5)
    message = str(err.value)
    assert "algo.name: ppo" in message  # the algorithm that reads it
    assert "algo.scale_by_std" in message and "algo.turn_gamma" in message  # what grpo reads
    with pytest.raises(ValueError, match="did you mean algo.turn_gamma"):
        AlgoConfig(name="rloo", gamma=0.9)
    with pytest.raises(ValueError, match="algo.clip_eps_high"):  # imitation does not clip
        AlgoConfig(name="rft", clip_eps_high=0.28)
    # at its default a key does nothing either way (a whole --print-config copied as a file)
    assert AlgoConfig(name="grpo", lam=1.0, search_beam=8).lam == 1.0


def test_every_algorithm_reads_keys_of_the_config() -> None:
    for name in BUILT_IN:
        keys = algo_keys(name)
        assert {"name", "loss_agg", "kl_coef"} <= keys <= set(AlgoConfig.model_fields), name
    read_by_some = set().union(*(algo_keys(n) for n in BUILT_IN))
    assert read_by_some == set(AlgoConfig.model_fields)  # no key that nothing reads


def test_all_presets_ship_and_validate() -> None:
    assert list_presets() == [
        "expert-iteration", "gigpo", "grpo", "ppo", "reinforce++", "rloo", "starpo", "starpo-s",
    ]  # fmt: skip
    for name in list_presets():
        tree = load_preset(name)
        assert set(tree) >= {"algo"}
        preset_algo_config(name)


def test_starpo_presets_match_the_paper_settings() -> None:
    starpo = preset_algo_config("starpo")
    assert starpo.use_critic
    assert (starpo.gamma, starpo.lam, starpo.kl_coef) == (1.0, 1.0, 0.001)
    assert not starpo.use_filter
    s = preset_algo_config("starpo-s")
    assert s.use_critic and s.filter_keep_ratio == 0.25
    assert (s.clip_eps_low, s.clip_eps_high, s.dual_clip_c) == (0.2, 0.28, 3.0)
    assert not s.use_reference and s.entropy_coef == 0.001
    assert not preset_algo_config("grpo").use_critic
    assert preset_algo_config("ppo").use_critic


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPresetError, match="starpo-s") as err:
        load_preset("starpo_s")
    assert "grpo" in str(err.value) and "reinforce++" in str(err.value)
