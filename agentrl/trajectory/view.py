"""Show an episode: trained (sampled) tokens highlighted, per-turn rewards, env observations.

`render_episode` builds a rich renderable for the terminal; `episode_html` a self-contained
HTML page (inline CSS, no scripts, no external files). Both decode ids with the run's
tokenizer; each sampled token's id and sampler logprob show on hover in the HTML page.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from typing import Any

from agentrl.trajectory.types import Sample, Trajectory


def _segments(sample: Sample) -> Iterator[tuple[bool, int, list[int], list[float]]]:
    """Runs of ids with the same (trained, turn): (trained, turn, ids, logps)."""
    start = 0
    n = len(sample.token_ids)
    for i in range(1, n + 1):
        if i == n or (sample.loss_mask[i], sample.turn_ids[i]) != (
            sample.loss_mask[start],
            sample.turn_ids[start],
        ):
            yield (
                bool(sample.loss_mask[start]),
                sample.turn_ids[start],
                sample.token_ids[start:i],
                sample.sampler_logp[start:i],
            )
            start = i


def _observation_text(obs: Any) -> str:
    if obs is None:
        return "(none)"
    if isinstance(obs, str):
        return obs
    return "\n".join(f"[{m['role']}] {m['content']}" for m in obs)


def _header(traj: Trajectory) -> str:
    return (
        f"env {traj.env_name or '?'} · seed {traj.seed} · group {traj.group_id} · "
        f"status {traj.status}{f' ({traj.error})' if traj.error else ''} · "
        f"return {traj.total_reward:.3f} · {traj.num_turns} turns · "
        f"{traj.num_sampled_tokens} trained tokens"
        + (" · per-turn samples" if traj.per_turn_samples else "")
    )


def render_episode(traj: Trajectory, tokenizer: Any) -> Any:
    """A rich renderable: the token stream (trained ids on green) and a per-turn table."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(_header(traj), style="bold")]
    for k, sample in enumerate(traj.samples):
        text = Text()
        if len(traj.samples) > 1:
            text.append(f"── sample {k} ──\n", style="bold cyan")
        for trained, _turn, ids, _ in _segments(sample):
            decoded = tokenizer.decode(ids, skip_special_tokens=False)
            text.append(decoded, style="black on green" if trained else "dim")
        parts.append(text)
    table = Table(title="turns", show_lines=True)
    for col in ("turn", "action", "finish", "reward", "observation", "info"):
        table.add_column(col, overflow="fold")
    for i, turn in enumerate(traj.turns):
        table.add_row(
            str(i),
            turn.action_text,
            turn.finish_reason,
            f"{turn.reward:.3f}",
            _observation_text(turn.observation),
            json.dumps(turn.info, default=str),
        )
    parts.append(table)
    return Group(*parts)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
.tokens { font-family: ui-monospace, monospace; white-space: pre-wrap; line-height: 1.6;
          border: 1px solid #ccc; padding: 1em; background: #fafafa; }
.p { color: #777; }
.s { background: #b7f0b1; color: #000; border-radius: 2px; }
.s:hover, .p:hover { outline: 1px solid #333; }
table { border-collapse: collapse; margin-top: 1.5em; }
td, th { border: 1px solid #ccc; padding: 4px 8px; vertical-align: top; text-align: left;
         white-space: pre-wrap; font-size: 0.9em; }
.legend span { padding: 0 6px; }
"""


def episode_html(traj: Trajectory, tokenizer: Any, *, title: str = "agentrl episode") -> str:
    """A self-contained HTML page for one episode (one span per token)."""
    out = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{html.escape(_header(traj))}</p>",
        "<p class='legend'><span class='s'>trained (sampled) tokens</span>"
        "<span class='p'>prompt and observation tokens</span></p>",
    ]
    for k, sample in enumerate(traj.samples):
        if len(traj.samples) > 1:
            out.append(f"<h3>sample {k}</h3>")
        spans = []
        for trained, turn, ids, logps in _segments(sample):
            for tid, lp in zip(ids, logps, strict=True):
                piece = html.escape(tokenizer.decode([tid], skip_special_tokens=False))
                tip = f"id {tid} · turn {turn}" + (f" · logp {lp:.3f}" if trained else "")
                cls = "s" if trained else "p"
                spans.append(f"<span class='{cls}' title='{tip}'>{piece}</span>")
        # One line of markup: in the pre-wrap box any whitespace between spans would show.
        out.append("<div class='tokens'>" + "".join(spans) + "</div>")
    out.append(
        "<table><tr><th>turn</th><th>action</th><th>finish</th><th>reward</th>"
        "<th>observation</th><th>info</th><th>weights</th></tr>"
    )
    for i, turn in enumerate(traj.turns):
        cells = [
            str(i),
            turn.action_text,
            turn.finish_reason,
            f"{turn.reward:.3f}",
            _observation_text(turn.observation),
            json.dumps(turn.info, default=str),
            f"v{turn.weight_version}",
        ]
        out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    out.append("</table></body></html>")
    return "\n".join(out)
