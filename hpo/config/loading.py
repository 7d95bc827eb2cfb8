"""Reading sweep files: YAML in, a validated :class:`~hpo.config.schema.SweepConfig` or one-line errors out.

Validation errors become :class:`~hpo.errors.ConfigError` messages of the form ``file: key: problem; fix``,
one line per problem (every problem pydantic finds, not only the first). YAML is read by a safe loader
that refuses what no sweep file needs and what would exhaust the process: a key given twice, nesting
deeper than :data:`MAX_DEPTH`, and aliases that expand to more than :data:`MAX_NODES` values.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hpo.config.schema import SweepConfig
from hpo.config.sections import INT_MAX, KeyedError, KeyedErrors
from hpo.errors import ConfigError


def _key(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


#: Deepest nesting of mappings and lists a sweep file may have (a sweep file needs 4).
MAX_DEPTH = 50
#: Most values a sweep file may hold once its aliases are expanded (digits_mlp.yaml holds about 80).
MAX_NODES = 100_000


def _format(source: str, err: dict[str, Any]) -> list[str]:
    """The lines of one pydantic error (several for a :class:`KeyedErrors` of the cross-section checks)."""
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, KeyedErrors):
        return [f"{source}: {e.key}: {e}" for e in ctx_error.errors]
    return [_format_one(source, err, ctx_error)]


def _format_one(source: str, err: dict[str, Any], ctx_error: Any) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "list["))))
    key = _key(loc)
    kind = err["type"]
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
    if kind in ("int_type", "float_type"):
        value = err.get("input")
        number = "a whole number" if kind == "int_type" else "a number"
        if isinstance(value, bool):
            return f"{source}: {key}: {str(value).lower()} is a boolean, not {number}; write {number}"
        if isinstance(value, str):
            shown = repr(value) if len(value) <= 40 else repr(value[:37] + "...")
            return f"{source}: {key}: {shown} is text, not {number}; write {number} without quotes"
        if kind == "int_type" and isinstance(value, float) and value.is_integer() and abs(value) <= INT_MAX:
            return f"{source}: {key}: {value!r} is a decimal number; write {int(value)}"
        if kind == "int_type" and isinstance(value, float) and math.isfinite(value):
            return f"{source}: {key}: {value:g} is not a whole number up to 2**31; write one"
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
        ConfigError: On any problem: one line per problem found (``file: key: problem; fix``).
    """
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: (top level): expected a mapping of keys, got {type(data).__name__}; "
            "start from search_spaces/digits_mlp.yaml"
        )
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as exc:
        lines = [line for err in exc.errors() for line in _format(source, err)]
        raise ConfigError("\n".join(dict.fromkeys(lines))) from None  # a union reports a problem once per branch
    except RecursionError:  # a document read otherwise than by read_yaml (which refuses deep nesting)
        raise ConfigError(f"{source}: (top level): nested too deeply to check; flatten it") from None


class DuplicateKeyError(yaml.YAMLError):
    """A mapping in a YAML file names the same key twice."""

    def __init__(self, key: Any, line: int) -> None:
        super().__init__(f"duplicate key {key!r} at line {line}")
        self.key, self.line = key, line


class TooDeepError(yaml.YAMLError):
    """A YAML document nests mappings or lists deeper than :data:`MAX_DEPTH`."""

    def __init__(self, line: int) -> None:
        super().__init__(f"nested deeper than {MAX_DEPTH} levels")
        self.line = line


class TooLargeError(yaml.YAMLError):
    """A YAML document's aliases expand to more than :data:`MAX_NODES` values (or refer to themselves)."""

    def __init__(self, line: int, cyclic: bool = False) -> None:
        what = f"aliases expand to more than {MAX_NODES:,} values"
        super().__init__("an alias refers to the value that holds it" if cyclic else what)
        self.line = line
        self.cyclic = cyclic


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error, not "the last wins".

    It also refuses nesting deeper than :data:`MAX_DEPTH` (before Python's recursion limit is reached) and
    documents whose aliases expand to more than :data:`MAX_NODES` values (a "billion laughs" document): the
    expanded size is counted on the composed node graph, where each alias is one shared node, so nothing is
    expanded to count it.
    """

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        """Composes one node, refusing nesting deeper than :data:`MAX_DEPTH`."""
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise TooDeepError(self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_node(self) -> Any:
        """The document's root node, once its expanded size is known to be below :data:`MAX_NODES`."""
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {}, set())
        return node

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


#: YAML 1.2's exponent floats without a dot (``1e-5``), which YAML 1.1 (PyYAML) reads as text: a number here.
_EXPONENT_FLOAT = re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+0123456789"))


def yaml_value(text: str) -> Any:
    """One value written as YAML (a ``--set`` value), read by the same rules as a sweep file (``1e-3`` is a number).

    Raises:
        yaml.YAMLError: If ``text`` is not YAML, nests too deeply or expands its aliases too far.
    """
    return yaml.load(text, Loader=_UniqueKeyLoader)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int], depth: int = 1) -> int:
    """Values in ``node`` with every alias expanded, counted once per distinct node (linear time).

    Raises:
        TooLargeError: Above :data:`MAX_NODES`, or for an alias inside the value it refers to.
        TooDeepError: Aliases inside aliases nest the values deeper than :data:`MAX_DEPTH`.
    """
    known = sizes.get(id(node))
    if known is not None:
        return known
    if id(node) in open_nodes:
        raise TooLargeError(node.start_mark.line + 1, cyclic=True)
    if depth > MAX_DEPTH:
        raise TooDeepError(node.start_mark.line + 1)
    size = 1
    if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        open_nodes.add(id(node))
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        for child in children:
            size += _expanded_size(child, sizes, open_nodes, depth + 1)
            if size > MAX_NODES:
                raise TooLargeError(node.start_mark.line + 1)
        open_nodes.discard(id(node))
    sizes[id(node)] = size
    return size


def read_yaml(path: str | Path) -> Any:
    """Reads a YAML file (sweep or cluster file): the one place hpo parses YAML.

    Raises:
        ConfigError: If the file is missing, is not UTF-8 text, or is not valid YAML (one line, with the
            line number), nests too deeply or expands its aliases to too many values.
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise ConfigError(f"{source}: (file): no such file; check the path")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{source}: line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as "
                          "UTF-8 (a sweep file is YAML text)") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except DuplicateKeyError as exc:
        raise ConfigError(f"{source}: line {exc.line}: key '{exc.key}' appears twice in one mapping (the last would "
                          "win silently); keep one") from None
    except TooDeepError as exc:
        raise ConfigError(f"{source}: line {exc.line}: {exc}; a sweep file needs a few levels, flatten it") from None
    except TooLargeError as exc:
        fix = "remove the alias" if exc.cyclic else "write the values out, or use fewer aliases"
        raise ConfigError(f"{source}: line {exc.line}: {exc}; {fix}") from None
    except RecursionError:
        raise ConfigError(f"{source}: (file): nested too deeply to read; flatten it") from None
    except yaml.reader.ReaderError as exc:  # a control character: binary data, not text
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise ConfigError(f"{source}: line {line}: character #x{char:04x} cannot be in a YAML file ({exc.reason}); "
                          "a sweep file is text, remove it") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        problem = (str(getattr(exc, "problem", None) or exc).strip().splitlines() or ["?"])[0]
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
            apply_override(data, dotted, value, source)
    return parse_sweep(data, source)


def option_overrides(
    num_samples: int | None = None, name: str | None = None, mlflow_uri: str | None = None
) -> dict[str, Any]:
    """The dotted sweep-file keys that the ``num_samples``, ``name`` and ``mlflow_uri`` options replace.

    ``hpo tune --num-samples/--name/--mlflow-uri`` and ``hpo.tune(num_samples=, name=, mlflow_uri=)``
    override the file the same way; an option left at None overrides nothing.

    Returns:
        E.g. ``{"search.num_samples": 4}``, for :func:`load_sweep`.
    """
    overrides: dict[str, Any] = {}
    if num_samples is not None:
        overrides["search.num_samples"] = num_samples
    if name is not None:
        overrides["name"] = name
    if mlflow_uri is not None:
        overrides["tracking.mlflow_uri"] = mlflow_uri
    return overrides


def apply_override(data: dict[str, Any], dotted: str, value: Any, source: str = "<sweep>") -> None:
    """Sets ``data[a][b] = value`` for ``dotted == "a.b"``, creating mappings on the way.

    Raises:
        ConfigError: If a key on the way holds a value, not a section (``--set name.x=1``).
    """
    *parents, last = dotted.split(".")
    node = data
    for i, part in enumerate(parents):
        if node.get(part) is None:  # absent, or an empty section (``trial:`` with nothing under it)
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            where = ".".join(parents[: i + 1])
            raise ConfigError(
                f"{source}: --set {dotted}: '{where}' is a value ({type(node).__name__}), not a section with keys; "
                f"set {where}=VALUE, or check the key"
            )
    node[last] = value
