"""Run only the warm start of `agentrl train --env sokoban` (its defaults, plus `key=value`
overrides) into OUT/warm_start.

    .venv/bin/python results/sokoban-rl/warm-start-spread/warm_start_only.py OUT [seed=1 ...]
"""

import logging
import sys
from pathlib import Path

from agentrl.train._cli import resolve_train_config
from agentrl.train.warm_start import warm_start

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    cfg = resolve_train_config(
        config_file=None, overrides=sys.argv[2:], preset=None, flags={"env.name": "sokoban"}
    )
    warm_start(cfg, Path(sys.argv[1]), progress=False)
