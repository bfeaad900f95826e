"""`agentrl view`: terminal rendering and the self-contained HTML page."""

from __future__ import annotations

import json
import re

import numpy as np
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


# Appended to a copy of the page: after layout, measures what a reader sees of each token
# and table cell (colour, size, not covered) and writes it into the DOM for --dump-dom.
_PROBE = """<script>
addEventListener("load", () => {
  const seen = (el) => {
    el.scrollIntoView({block: "center"});
    const r = el.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    const style = getComputedStyle(el);
    return {text: el.textContent, background: style.backgroundColor, width: r.width,
            height: r.height, top: r.top + scrollY, left: r.left + scrollX, on_top: hit === el || el.contains(hit),
            shown: style.visibility === "visible" && style.display !== "none"};
  };
  const all = (sel) => [...document.querySelectorAll(sel)];
  const report = {
    trained: all(".tokens span.s").map(seen),
    prompt: all(".tokens span.p").map(seen),
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


def test_html_view_in_headless_chromium(run, require_chromium: str) -> None:
    """In a real browser, trained tokens are the highlighted ones and each turn's reward is
    a visible table cell; a screenshot shows the highlight."""
    from PIL import Image

    from agentrl.trajectory._browser import dump_dom, screenshot

    tmp, trajs, path, _ = run
    traj = trajs[1]
    page = tmp / "browser.html"
    res = CliRunner().invoke(app, ["view", str(path), "--episode", "1", "--html", str(page)])
    assert res.exit_code == 0, res.output
    probed = tmp / "probed.html"
    probed.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    dom = dump_dom(probed)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, flags=re.DOTALL)
    assert found, dom[-2000:]
    report = json.loads(
        found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    )

    highlight = "rgb({}, {}, {})".format(*HIGHLIGHT_RGB)
    trained, prompt = report["trained"], report["prompt"]
    assert len(trained) == traj.num_sampled_tokens
    assert len(trained) + len(prompt) == sum(len(s) for s in traj.samples)
    assert all(t["background"] == highlight for t in trained)
    assert not any(t["background"] == highlight for t in prompt)
    visible = [t for t in trained if t["text"].strip()]
    assert visible and all(t["shown"] and t["width"] > 0 and t["on_top"] for t in visible)

    reward_col = report["header"].index("reward")
    rows = report["rows"]
    assert len(rows) == traj.num_turns
    tokens_bottom = max(t["top"] + t["height"] for t in trained + prompt)
    for turn, cells in zip(traj.turns, rows, strict=True):
        cell = cells[reward_col]
        assert cell["text"] == f"{turn.reward:.3f}"
        assert cell["shown"] and cell["width"] > 0 and cell["on_top"]
        assert cell["top"] >= tokens_bottom  # the table follows the token stream

    # The screenshot shows the highlight where the DOM puts each trained token.
    width, height = 1000, min(report["page_height"], 6000)
    png = screenshot(page, tmp / "view.png", width=width, height=height)
    pixels = np.asarray(Image.open(png).convert("RGB"), dtype=np.int16)  # [H, W, 3]
    is_green = np.abs(pixels - HIGHLIGHT_RGB).max(axis=-1) <= 2  # [H, W]

    def green_share(token: dict) -> float:
        top, bottom = int(token["top"]) + 1, int(token["top"] + token["height"]) - 1
        left, right = int(token["left"]) + 1, int(token["left"] + token["width"]) - 1
        return float(is_green[top:bottom, left:right].mean())

    def in_view(tokens: list[dict]) -> list[dict]:
        return [t for t in tokens if t["text"].strip() and t["top"] + t["height"] < height]

    assert len(in_view(trained)) >= 10 and len(in_view(prompt)) >= 10, report["page_height"]
    assert all(green_share(t) > 0.1 for t in in_view(trained))  # glyphs cover the rest
    assert all(green_share(t) == 0 for t in in_view(prompt))
    assert (pixels.max(axis=-1) < 90).sum() > 500  # text is drawn
