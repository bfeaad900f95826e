"""docs/reference/config.md is generated from the pydantic models and must stay fresh."""

from __future__ import annotations

from _docs_helpers import DOCS, load_script
from pydantic import BaseModel, ConfigDict, Field

from agentrl.config import TrainConfig, config_keys

gen = load_script("gen_config_reference")


def test_committed_reference_is_fresh() -> None:
    expected = gen.render()
    committed = (DOCS / "reference" / "config.md").read_text()
    assert committed == expected, (
        "docs/reference/config.md is out of date with the config models; regenerate it with: "
        f"{gen.COMMAND}"
    )


def test_every_config_key_is_in_the_reference() -> None:
    """Each key has its row, or sits in a section listed as one row (`warm_start.optim`)."""
    text = gen.render()

    def listed(key: str) -> bool:
        parts = key.split(".")
        return any(f"| `{'.'.join(parts[:n])}` |" in text for n in range(1, len(parts) + 1))

    missing = [k for k in config_keys() if not listed(k)]
    assert not missing, f"keys missing from the reference: {missing}"


def test_check_mode_reports_a_stale_file(tmp_path, capsys) -> None:
    stale = tmp_path / "config.md"
    stale.write_text("# old\n")
    assert gen.main(["--check", "--out", str(stale)]) == 1
    assert gen.COMMAND in capsys.readouterr().err
    assert gen.main(["--out", str(stale)]) == 0
    assert gen.main(["--check", "--out", str(stale)]) == 0


class _Inner(BaseModel):
    """Inner section.

    More text that stays out of the summary."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    ratio: float | None = Field(None, gt=0.0, le=1.0)
    """A | fraction."""


class _Outer(BaseModel):
    """Outer section."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str
    """Required name."""
    mode: str = "a"
    """Mode."""
    pair: tuple[float, float] = (0.9, 0.999)
    """Two numbers."""
    inner: _Inner = Field(default_factory=_Inner)
    """The inner part."""


def test_render_of_a_small_model() -> None:
    text = gen.render(_Outer)
    assert "| `name` | str | `*required*` | Required name. |" in text
    assert "| `pair` | tuple[float, float] | `[0.9, 0.999]` | Two numbers. |" in text
    assert "| `inner.ratio` | float \\| None (> 0.0, <= 1.0) | `null` | A \\| fraction. |" in text
    assert "- [`inner`](#inner): The inner part." in text
    assert "Inner section. (`" in text and "More text" not in text
    assert "Defaults of `agentrl train`" not in text


class _Holder(BaseModel):
    """Holds a second `_Inner`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    inner: _Inner = Field(default_factory=lambda: _Inner(ratio=0.5))
    """The inner part, with another ratio."""


class _Repeats(BaseModel):
    """Holds `_Inner` twice: at the top, and under `holder`."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    holder: _Holder = Field(default_factory=_Holder)
    """The holder."""
    inner: _Inner = Field(default_factory=_Inner)
    """The inner part."""


def test_a_repeated_section_is_one_row_linking_to_the_first() -> None:
    """A section model that appears twice is documented in full at its shallowest path; the
    other place gets one row with a link and the defaults that differ."""
    text = gen.render(_Repeats)
    assert "| `inner.ratio` |" in text and "| `holder.inner.ratio` |" not in text
    row = next(line for line in text.splitlines() if line.startswith("| `holder.inner` |"))
    assert "[`inner`](#inner) section" in row
    assert '`{"ratio": 0.5}`' in row
    assert "The inner part, with another ratio." in row
    assert "- [`holder.inner`]" not in text


def test_literal_types_render_as_choices() -> None:
    field = TrainConfig.model_fields["model"].annotation.model_fields["dtype"]
    assert gen.format_type(field.annotation) == '"auto" | "float32" | "bfloat16" | "float16"'


def test_train_defaults_table_names_changed_keys() -> None:
    rows = {key: (plain, used) for key, plain, used in gen.train_defaults()}
    assert rows, "agentrl train uses exactly the model defaults? the CPU defaults file is gone"
    for plain, used in rows.values():
        assert plain != used
