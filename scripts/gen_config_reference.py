"""Write docs/reference/config.md from the pydantic models nested in `TrainConfig`.

Every key gets its dotted path, type (with bounds), default and docstring. The reference is
generated, never edited by hand; `tests/docs/test_config_reference.py` fails when the committed
file differs from what this script would write.

    .venv/bin/python scripts/gen_config_reference.py           # rewrite the file
    .venv/bin/python scripts/gen_config_reference.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "reference" / "config.md"
COMMAND = ".venv/bin/python scripts/gen_config_reference.py"

_BOUNDS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "<="),
)


@dataclass
class Key:
    """One leaf key of the config."""

    path: str
    type: str
    default: str
    doc: str


@dataclass
class Section:
    """One pydantic model in the tree, at a dotted path (`""` for the root)."""

    path: str
    model: type[BaseModel]
    field_doc: str
    """The docstring of the field that holds this section in its parent."""
    keys: list[Key]

    @property
    def class_doc(self) -> str:
        """The first paragraph of the section model's own docstring."""
        return _one_line((self.model.__doc__ or "").split("\n\n")[0])


def format_type(annotation: Any) -> str:
    """A short, readable spelling of a type annotation (`int | None`, `"hf" | "vllm"`)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(format_type(a) for a in args)
    if origin is typing.Annotated:
        return format_type(args[0])
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        inner = ", ".join("..." if a is Ellipsis else format_type(a) for a in args)
        return f"{name}[{inner}]" if args else name
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return " | ".join(json.dumps(m.value) for m in annotation)
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _bounds(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        for kind, attr, symbol in _BOUNDS:
            if isinstance(meta, kind):
                parts.append(f"{symbol} {getattr(meta, attr)}")
    return ", ".join(parts)


def _default(field: FieldInfo) -> Any:
    if field.default is not PydanticUndefined:
        return field.default
    if field.default_factory is not None:
        return field.default_factory()  # type: ignore[call-arg]
    return PydanticUndefined


def format_default(value: Any) -> str:
    """The default as it would be written in a YAML config (`null`, `true`, `[0.9, 0.999]`)."""
    if value is PydanticUndefined:
        return "*required*"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, tuple):
        value = list(value)
    try:
        return json.dumps(value)
    except TypeError:
        return str(value)


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def _submodel(annotation: Any) -> type[BaseModel] | None:
    """The model class of a nested section (`Foo` or `Foo | None`), else None."""
    candidates = typing.get_args(annotation) if typing.get_origin(annotation) else (annotation,)
    models = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
    return models[0] if len(models) == 1 else None


def _documented_paths(model: type[BaseModel]) -> dict[type[BaseModel], str]:
    """Where each section model is documented in full: its shallowest path in the tree."""
    found: dict[type[BaseModel], str] = {}
    queue: list[tuple[type[BaseModel], str]] = [(model, "")]
    while queue:
        parent, path = queue.pop(0)
        for name, field in parent.model_fields.items():
            sub = _submodel(field.annotation)
            if sub is not None and sub is not parent and sub not in found:
                found[sub] = f"{path}.{name}" if path else name
                queue.append((sub, found[sub]))
    for sub in list(found):  # a base of a documented section (`warm_start.optim`, an `optim`
        wider = [c for c in found if c is not sub and issubclass(c, sub)]  # less critic_lr)
        if wider:  # repeats the one documented in full
            found[sub] = found[wider[0]]
    return found


def _anchor(path: str) -> str:
    return (path or "top-level").replace(".", "")


def _repeated_section(
    dotted: str,
    field: FieldInfo,
    sub: type[BaseModel],
    full: str,
    documented: dict[type[BaseModel], str],
) -> Key:
    """One row for a section that repeats one documented elsewhere (`warm_start.optim` is an
    `optim`): a link to it, and the defaults that differ from its own."""
    own = _default(field)
    if isinstance(own, BaseModel):
        ref = sub.model_construct().model_dump(mode="json")
        own = {k: v for k, v in own.model_dump(mode="json").items() if ref.get(k) != v}
    link = f"[`{full}`](#{_anchor(full)})"
    doc = _one_line(field.description)
    note = f"The keys of {link}, with its defaults but for those shown."
    full_model = next((c for c, p in documented.items() if p == full and c is not sub), sub)
    missing = [k for k in full_model.model_fields if k not in sub.model_fields]
    if missing:
        note = (
            f"The keys of {link} but {', '.join(f'`{k}`' for k in missing)}, with its "
            "defaults but for those shown."
        )
    return Key(dotted, f"{link} section", format_default(own), f"{doc} {note}".strip())


def collect(
    model: type[BaseModel],
    path: str = "",
    doc: str = "",
    documented: dict[type[BaseModel], str] | None = None,
) -> list[Section]:
    """The sections of `model`, depth first: each with its leaf keys in declaration order.

    A section that repeats one documented elsewhere in the tree is one row of its parent."""
    if documented is None:
        documented = _documented_paths(model)
    section = Section(path, model, doc, [])
    children: list[Section] = []
    for name, field in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        sub = _submodel(field.annotation)
        if sub is not None and sub is not model:
            if documented.get(sub, dotted) != dotted:
                section.keys.append(
                    _repeated_section(dotted, field, sub, documented[sub], documented)
                )
            else:
                children.extend(collect(sub, dotted, _one_line(field.description), documented))
            continue
        type_text = format_type(field.annotation)
        bounds = _bounds(field)
        if bounds:
            type_text = f"{type_text} ({bounds})"
        section.keys.append(
            Key(dotted, type_text, format_default(_default(field)), _one_line(field.description))
        )
    return [section, *children]


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
            sub = _flatten(value, dotted)
            flat.update(sub if sub else {dotted: value})
        else:
            flat[dotted] = value
    return flat


def train_defaults() -> list[tuple[str, str, str]]:
    """`(key, model default, agentrl train default)` for each key the CPU defaults and the
    default preset of `agentrl train` change."""
    from agentrl.cli.train import resolve_train_config
    from agentrl.config import TrainConfig

    plain = _flatten(TrainConfig().model_dump(mode="json"))
    cfg = resolve_train_config(config_file=None, overrides=[], preset=None, flags={})
    used = _flatten(cfg.model_dump(mode="json"))
    rows = [(k, format_default(plain.get(k)), format_default(v)) for k, v in used.items()]
    return [r for r in rows if r[1] != r[2]]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(model: type[BaseModel] | None = None) -> str:
    """The whole reference page as Markdown."""
    if model is None:
        from agentrl.config import TrainConfig

        model = TrainConfig
    sections = collect(model)
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated by `{COMMAND}` from the pydantic models; do not edit by hand. -->",
        "",
        "Every key `agentrl train` accepts, generated from the pydantic models nested in",
        "`agentrl.config.TrainConfig`. Set keys in a YAML file (`-c run.yaml`, one mapping per",
        "section) or on the command line (`--set rollout.group_size=8`); print the resolved",
        "config of a run with `agentrl train --print-config`. Unknown keys are errors. Defaults",
        "are the model defaults: `agentrl train` first layers its CPU defaults",
        "(`agentrl/train/defaults/cpu.yaml`) and the algorithm preset on top of them (see",
        "[algorithms](../algorithms.md)).",
        "",
        "Sections:",
        "",
    ]
    for s in sections:
        title = s.path or "top level"
        anchor = _anchor(s.path)
        summary = s.field_doc or s.class_doc
        lines.append(
            f"- [`{title}`](#{anchor}): {summary}" if s.path else f"- [{title}](#{anchor})"
        )
    for s in sections:
        if not s.keys:
            continue
        lines += ["", f"## {s.path or 'top level'}", ""]
        origin = f"`{s.model.__module__}.{s.model.__qualname__}`"
        doc = s.class_doc or s.field_doc
        lines += [f"{doc} ({origin})" if doc else origin, ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        for k in s.keys:
            lines.append(
                f"| `{k.path}` | {_cell(k.type)} | `{_cell(k.default)}` | {_cell(k.doc)} |"
            )
    if model.__name__ == "TrainConfig":
        lines += _train_defaults_lines()
    return "\n".join(lines) + "\n"


def _train_defaults_lines() -> list[str]:
    from agentrl.cli.train import DEFAULT_PRESET, env_defaults
    from agentrl.config import EnvConfig

    env = EnvConfig().name
    preset = env_defaults(env)[1] or DEFAULT_PRESET
    lines = [
        "",
        "## Defaults of `agentrl train`",
        "",
        "`agentrl train` starts from `agentrl/train/defaults/cpu.yaml` (sized for a CPU",
        "machine), then the defaults of the run's env, if it has some",
        "(`agentrl/train/defaults/cpu-<env>.yaml`), then the preset, then the env's keys for",
        "that preset (its `presets:` section), then `-c FILE`, the command-line flags and",
        "`--set`. The preset is `--preset`; without it, when the file or flags name an",
        "algorithm, the env's preset if it runs that algorithm, else the preset of that name",
        "(`--set algo.name=ppo` is `--preset ppo`), else none; with no algorithm named, the",
        f"env's preset (else `{DEFAULT_PRESET}`). The lower layers' `algo` keys that the run's",
        "algorithm does not read are left out; such a key in the file or on the command line is",
        "an error that names the keys the algorithm reads. With the default env,",
        f"`{env}`, and its preset, `{preset}`, these keys differ from the model defaults above:",
        "",
        "| key | model default | `agentrl train` default |",
        "|---|---|---|",
    ]
    for key, plain, used in train_defaults():
        lines.append(f"| `{key}` | `{_cell(plain)}` | `{_cell(used)}` |")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Write the reference (or with `--check`, report whether it is stale)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    parser.add_argument("--out", type=Path, default=OUTPUT, help="file to write or check")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text() if args.out.is_file() else ""
        if current != text:
            print(f"{args.out} is out of date; regenerate it with: {COMMAND}", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
