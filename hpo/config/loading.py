"""Reading sweep files: YAML in, a validated :class:`~hpo.config.schema.SweepConfig` or a one-line error out.

Validation errors become :class:`~hpo.errors.ConfigError` messages of the form ``file: key: problem; fix``.
"""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hpo.config.schema import SweepConfig
from hpo.config.sections import KeyedError
from hpo.errors import ConfigError


def _key(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _format(source: str, err: dict[str, Any]) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "list["))))
    key = _key(loc)
    kind = err["type"]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, KeyedError):
        return f"{source}: {ctx_error.key}: {ctx_error}"
    if kind == "extra_forbidden":
        return f"{source}: {key}: unknown key; remove it or check its spelling"
    if kind == "missing":
        return f"{source}: {key}: required key is missing; add it"
    if kind == "literal_error":
        expected = err["ctx"]["expected"]
        return f"{source}: {key}: {err['input']!r} is not allowed; use one of {expected}"
    if kind == "value_error":
        return f"{source}: {key}: {err['msg'].removeprefix('Value error, ')}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{source}: {key}: {err['input']!r} is out of range ({err['msg'].lower()}); change it"
    if kind == "too_short":
        return f"{source}: {key}: must not be empty; add at least one entry"
    shown = repr(err.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{source}: {key}: {err['msg'].lower()} (got {shown}); fix the value"


def parse_sweep(data: Any, source: str = "<sweep>") -> SweepConfig:
    """Validates a sweep given as a mapping.

    Args:
        data: The parsed YAML document.
        source: The file name to put in error messages.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: On any problem, with a one-line message.
    """
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: (top level): expected a mapping of keys, got {type(data).__name__}; "
            "start from search_spaces/digits_mlp.yaml"
        )
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format(source, exc.errors()[0])) from None


class DuplicateKeyError(yaml.YAMLError):
    """A mapping in a YAML file names the same key twice."""

    def __init__(self, key: Any, line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line}")
        self.key, self.line = key, line


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error, not "the last wins"."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # the base loader reports an unhashable key itself
            if key in seen:
                raise DuplicateKeyError(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> Any:
    """Reads a YAML file (sweep or cluster file): the one place hpo parses YAML.

    Raises:
        ConfigError: If the file is missing or is not valid YAML (one line, with the line number).
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise ConfigError(f"{source}: (file): no such file; check the path")
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except DuplicateKeyError as exc:
        raise ConfigError(f"{source}: line {exc.line}: key '{exc.key}' appears twice in one mapping (the last would "
                          "win silently); keep one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        problem = getattr(exc, "problem", exc)
        raise ConfigError(f"{source}: {where}: not valid YAML ({problem}); fix the syntax") from None


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None) -> SweepConfig:
    """Reads and validates a sweep file.

    Args:
        path: Path of the YAML sweep file.
        overrides: Dotted keys to replace before validation, e.g. ``{"search.num_samples": 4}``.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: If the file is missing, is not YAML, or does not validate.
    """
    data = read_yaml(path)
    source = str(path)
    if isinstance(data, dict):
        for dotted, value in (overrides or {}).items():
            apply_override(data, dotted, value)
    return parse_sweep(data, source)


def apply_override(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Sets ``data[a][b] = value`` for ``dotted == "a.b"``, creating mappings on the way."""
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
