"""`agentrl view`: terminal rendering and the self-contained HTML page."""

from __future__ import annotations

import html
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from agentrl.cli import app
from agentrl.rollout.loop import rollout
from agentrl.rollout.testing import ScriptedEngine
from agentrl.trajectory.io import write_step
from agentrl.trajectory.testing import ScriptedEnv, build_tokenizer, plain_vocab_ids


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


def _error_text(output: str) -> str:
    """An error box's text on one line: where the box wraps depends on the temporary path's
    length, so a phrase may be split over two of its lines."""
    return " ".join(output.replace("│", " ").split())


def test_view_needs_a_tokenizer(run) -> None:
    tmp, _, path, without = run
    res = CliRunner().invoke(app, ["view", str(without)])
    assert res.exit_code != 0 and "pass --model NAME_OR_PATH" in _error_text(res.output)
    res = CliRunner().invoke(app, ["view", str(without), "--model", str(tmp / "tok")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["view", str(path), "--episode", "5"])
    assert res.exit_code != 0 and "holds episodes 0..1" in _error_text(res.output)


def test_view_decodes_with_the_base_of_a_lora_adapter(run) -> None:
    """A run that continues an adapter names the adapter folder (no tokenizer in it)."""
    tmp, _, _, without = run
    adapter = tmp / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(tmp / "tok")})
    )
    res = CliRunner().invoke(app, ["view", str(without), "--model", str(adapter)])
    assert res.exit_code == 0, res.output
    assert "trained tokens" in res.output


# Appended to a copy of the page: after layout, measures what a reader sees of each token
# and table cell (colour, place, size, not covered) and writes it into the DOM for --dump-dom.
_PROBE = """<script>
addEventListener("load", () => {
  const seen = (el) => {  // a token wrapped over two lines has one box on each
    el.scrollIntoView({block: "center"});
    const r = el.getBoundingClientRect();
    const boxes = [...el.getClientRects()].filter((b) => b.width > 0.5);
    const hit = (b) => document.elementFromPoint(b.left + b.width / 2, b.top + b.height / 2);
    const style = getComputedStyle(el);
    return {text: el.textContent, trained: el.classList.contains("s"),
            background: style.backgroundColor, shown: style.visibility === "visible",
            top: r.top + scrollY, left: r.left + scrollX, width: r.width, height: r.height,
            boxes: boxes.map((b) => [b.left + scrollX, b.top + scrollY, b.width, b.height]),
            on_top: boxes.some((b) => hit(b) === el || el.contains(hit(b)))};
  };
  const all = (sel, root = document) => [...root.querySelectorAll(sel)];
  const report = {
    samples: all(".tokens").map((div) => ({text: div.innerText, tokens: all("span", div).map(seen)})),
    header: all("table th").map((th) => th.textContent),
    rows: all("table tr").slice(1).map((tr) => [...tr.cells].map(seen)),
    page_height: document.documentElement.scrollHeight,
  };
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(report);
  document.body.append(out);
});
</script>"""

HIGHLIGHT_RGB = (183, 240, 177)  # the page's #b7f0b1 for trained tokens
WIDTH = 1000  # of the browser window, the same for the probe and the screenshot


def _probe(page: Path) -> dict:
    """What Chromium shows of `page`: the _PROBE report, read back from the dumped DOM."""
    from agentrl.trajectory._browser import dump_dom

    probed = page.with_suffix(".probed.html")
    probed.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    found = re.search(
        r'<pre id="probe">(.*?)</pre>', dump_dom(probed, width=WIDTH), flags=re.DOTALL
    )
    assert found, "the probe script did not run"
    return json.loads(html.unescape(found.group(1)))


def test_html_view_in_headless_chromium(run, require_chromium: str) -> None:
    """In a real browser, trained tokens are the highlighted ones and flow as the text the
    model saw, and each turn's reward is a visible table cell; a screenshot shows it."""
    from PIL import Image

    from agentrl.trajectory._browser import screenshot

    tmp, trajs, path, _ = run
    traj = trajs[1]
    page = tmp / "browser.html"
    res = CliRunner().invoke(app, ["view", str(path), "--episode", "1", "--html", str(page)])
    assert res.exit_code == 0, res.output
    report = _probe(page)

    # Highlighted exactly where the model sampled (loss_mask 1), the rest plain.
    assert len(report["samples"]) == len(traj.samples)
    tokens = [t for sample in report["samples"] for t in sample["tokens"]]
    trained = [t for t in tokens if t["trained"]]
    assert len(trained) == traj.num_sampled_tokens
    assert [t["trained"] for t in tokens] == [bool(m) for s in traj.samples for m in s.loss_mask]
    highlight = "rgb({}, {}, {})".format(*HIGHLIGHT_RGB)
    assert all((t["background"] == highlight) == t["trained"] for t in tokens)
    readable = [t for t in tokens if t["text"].strip()]
    assert all(t["shown"] and t["boxes"] and t["on_top"] for t in readable)

    # The tokens read as one text: nothing between them, and they share lines.
    for sample in report["samples"]:
        assert sample["text"] == "".join(t["text"] for t in sample["tokens"])
        pairs = list(itertools.pairwise(sample["tokens"]))
        same_line = [a for a, b in pairs if "\n" not in a["text"] + b["text"]]
        breaks = [a for a, b in pairs if "\n" not in a["text"] + b["text"] and a["top"] != b["top"]]
        assert len(breaks) < len(same_line) / 4, (len(breaks), len(same_line))

    # One reward cell per turn, visible, below the tokens.
    reward_col = report["header"].index("reward")
    assert len(report["rows"]) == traj.num_turns
    tokens_bottom = max(t["top"] + t["height"] for t in tokens)
    for turn, cells in zip(traj.turns, report["rows"], strict=True):
        cell = cells[reward_col]
        assert cell["text"] == f"{turn.reward:.3f}"
        assert cell["shown"] and cell["width"] > 0 and cell["on_top"]
        assert cell["top"] >= tokens_bottom

    # The screenshot shows the highlight where the DOM puts each trained token, and only there.
    height = min(report["page_height"], 6000)
    png = screenshot(page, tmp / "view.png", width=WIDTH, height=height)
    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.int16)  # [H, W, 3]
    is_green = np.abs(pixels - HIGHLIGHT_RGB).max(axis=-1) <= 2  # [H, W]

    def green_share(token: dict) -> float:
        """The largest share of highlight colour inside one of the token's boxes."""
        shares = [
            is_green[int(y) + 1 : int(y + h) - 1, int(x) + 1 : int(x + w) - 1].mean()
            for x, y, w, h in token["boxes"]
            if w >= 3
        ]
        return float(max(shares, default=0.0))

    in_view = [t for t in readable if t["top"] + t["height"] < height]
    assert sum(t["trained"] for t in in_view) >= 10 and sum(not t["trained"] for t in in_view) >= 10
    assert all(green_share(t) > 0.1 for t in in_view if t["trained"])  # glyphs cover the rest
    assert all(green_share(t) == 0 for t in in_view if not t["trained"])
    assert (pixels.max(axis=-1) < 90).sum() > 500  # text is drawn


def test_screenshot_script_writes_the_docs_picture(run, require_chromium: str) -> None:
    from PIL import Image

    tmp, _, path, _ = run
    script = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_view.py"
    png = tmp / "shot.png"
    argv = [sys.executable, str(script), str(path), "--episode", "1", "--out", str(png)]
    proc = subprocess.run(
        [*argv, "--width", "640", "--height", "480"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Image.open(png).size == (640, 480)
