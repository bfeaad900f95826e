"""Screenshot one episode's `agentrl view --html` page in headless Chromium (the docs' picture).

    .venv/bin/agentrl rollout --env sokoban --model results/sokoban-rl/warm_start \\
        --out /tmp/shot --episodes 24 --seed 100 --max-new-tokens 16 --temperature 0.3
    .venv/bin/python scripts/screenshot_view.py /tmp/shot/trajectories/step_000000.jsonl \\
        --episode 3 --out docs/view_episode.png

Needs Chromium (`sudo apt-get install -y chromium`).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from agentrl.cli.view import _load_tokenizer
from agentrl.trajectory._browser import screenshot
from agentrl.trajectory.io import read_trajectories
from agentrl.trajectory.view import episode_html


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="A trajectory file (.jsonl or .parquet).")
    parser.add_argument("--episode", type=int, default=0)
    parser.add_argument("--model", help="Tokenizer (default: the file's model).")
    parser.add_argument("--out", type=Path, required=True, help="PNG to write.")
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--height", type=int, default=1180)
    args = parser.parse_args()

    data = read_trajectories(args.path)
    tokenizer = _load_tokenizer(args.model or data.metadata["model"])
    title = f"{args.path.name} · episode {args.episode}"
    page = episode_html(data.trajectories[args.episode], tokenizer, title=title)
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "episode.html"
        html.write_text(page)
        screenshot(html, args.out, width=args.width, height=args.height)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
