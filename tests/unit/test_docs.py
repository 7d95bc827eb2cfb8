"""The reference pages say what the code does: the sweep-file reference shows the schema's real defaults."""

from __future__ import annotations

import re
from typing import Any

import yaml

from hpo.config import SweepConfig
from tests.conftest import ROOT

#: Keys the reference shows with example values: they have no default.
EXAMPLES = {"name", "model", "data.train", "space"}


def _reference() -> dict[str, Any]:
    text = (ROOT / "docs" / "sweep-file.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, flags=re.S)
    assert block, "docs/sweep-file.md has no yaml block"
    return yaml.safe_load(block.group(1))


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted path → value of every leaf (a mapping is walked into, anything else is a leaf)."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path in EXAMPLES:
            continue
        if isinstance(value, dict) and value:
            out.update(_leaves(value, f"{path}."))
        else:
            out[path] = value
    return out


def test_the_sweep_file_reference_is_a_valid_sweep_with_the_real_defaults():
    reference = _reference()
    SweepConfig.model_validate(reference)  # the block itself is a valid sweep file
    minimal = {k: reference[k] for k in ("name", "model", "space")} | {"data": {"train": reference["data"]["train"]}}
    defaults = _leaves(SweepConfig.model_validate(minimal).model_dump(mode="json"))
    shown = _leaves(reference)
    assert {k: v for k, v in shown.items() if defaults.get(k, object()) != v} == {}, "defaults shown wrongly"
    assert sorted(set(defaults) - set(shown)) == [], "keys the reference does not show"
    assert sorted(set(shown) - set(defaults)) == [], "keys the reference shows that the schema does not have"
