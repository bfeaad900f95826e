"""SFTConfig: a partial `optim` override keeps the SFT schedule defaults."""

from agentrl.config import load_config
from agentrl.sft.config import SFTConfig


def test_partial_optim_override_keeps_sft_schedule() -> None:
    """`--lr` alone used to reset the schedule to OptimConfig's constant default."""
    cfg = load_config(None, ["optim.lr=5e-5"], model=SFTConfig)
    assert cfg.optim.lr == 5e-5
    assert cfg.optim.schedule == "cosine"
    assert cfg.optim.warmup_steps == 10
    assert cfg.optim.min_lr_ratio == 0.1


def test_explicit_optim_fields_win() -> None:
    """Fields given explicitly override the SFT defaults."""
    cfg = load_config(None, ["optim.schedule=constant", "optim.warmup_steps=2"], model=SFTConfig)
    assert (cfg.optim.schedule, cfg.optim.warmup_steps, cfg.optim.lr) == ("constant", 2, 1e-3)
    assert SFTConfig().optim.schedule == "cosine"
