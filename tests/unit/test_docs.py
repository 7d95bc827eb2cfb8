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


DOCS = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]


def _pyproject() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirement_names(lines: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-") for line in lines
            if line.strip() and not line.lstrip().startswith("#")}


def test_every_see_below_has_something_below():
    """A "see below" is followed, later in the same page, by a section heading."""
    for path in DOCS:
        text = path.read_text()
        for found in re.finditer(r"see below", text, flags=re.I):
            line = text.count("\n", 0, found.start()) + 1
            assert re.search(r"^#{2,} ", text[found.end():], flags=re.M), f"{path.name}:{line}: nothing below"


def test_named_extras_exist():
    extras = set(_pyproject()["project"]["optional-dependencies"])
    for path in DOCS:
        for name in re.findall(r"(?<!'s )`\[?([\w-]+)\]?` extra\b", path.read_text()):  # not "Ray's `default` extra"
            assert name in extras, f"{path.name}: names the extra '{name}'; pyproject.toml has {sorted(extras)}"


def test_no_pip_install_of_a_dependency_hpo_already_has():
    deps = _requirement_names(_pyproject()["project"]["dependencies"])
    for path in DOCS:
        for args in re.findall(r"pip install ([^`\n]+)", path.read_text()):
            bare = [a for a in args.split() if not a.startswith("-") and "[" not in a and "/" not in a]
            named = _requirement_names([a.strip("'\"") for a in bare])
            assert not named & deps, f"{path.name}: 'pip install {args}' installs {named & deps}, already a dependency"


def test_every_hpo_tag_the_tracking_code_sets_is_documented():
    tags = set()
    for path in (ROOT / "hpo" / "tracking").glob("*.py"):
        tags |= set(re.findall(r"""["'](hpo\.[a-z_]+)["']\s*[:\]]""", path.read_text()))
    assert "hpo.kind" in tags  # the pattern finds the tag keys
    docs = "".join(path.read_text() for path in DOCS)
    assert sorted(t for t in tags if f"`{t}`" not in docs) == []


def test_readme_and_docs_point_to_the_page_that_has_it():
    """README's pointers: partitions are described in docs/search.md, not docs/data.md."""
    readme = (ROOT / "README.md").read_text()
    bullets = re.findall(r"^- \[docs/(\w+)\.md\]\(docs/\w+\.md\):(.*?)(?=^- |^$|\Z)", readme, flags=re.M | re.S)
    assert bullets
    for page, words in bullets:
        if "partition" in words:
            assert page == "search", f"README says docs/{page}.md has partitions"
    assert "partitions" in (ROOT / "docs" / "search.md").read_text()
    assert "runner-up" not in (ROOT / "docs" / "statistics.md").read_text()  # the winner is tested against each rival


def test_requirement_files_list_what_pyproject_declares():
    """`make install` installs requirements/*.txt; a pip install installs pyproject.toml's lists: the same."""
    project = _pyproject()["project"]
    stack = (ROOT / "requirements" / "stack.txt").read_text().splitlines()
    build_only = {"cmake", "setuptools"}  # Horovod's build and Petastorm's declared setuptools (docs/stack.md)
    assert _requirement_names(stack) - build_only == _requirement_names(project["dependencies"])
    # Every exact pin of pyproject.toml is one docs/stack.md gives a reason for, and the version make install uses.
    table = set(re.findall(r"^\| ([\w, -]+) \| ", (ROOT / "docs" / "stack.md").read_text(), flags=re.M))
    explained = {name.strip() for row in table for name in row.split(",")}
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    for requirement in project["dependencies"] + extras:
        if "==" in requirement:
            name = _requirement_names([requirement]).pop()
            assert name in explained, f"pyproject.toml pins {requirement}; docs/stack.md does not say why"
            assert re.sub(r"\[.*\]", "", requirement) in {line.strip() for line in stack}, requirement
    dev = (ROOT / "requirements" / "dev.txt").read_text().splitlines()
    assert _requirement_names(dev) == _requirement_names(project["optional-dependencies"]["dev"]) - {"hpo-sweeps"}
    assert {"gp", "cluster", "gpu", "dev"} <= set(project["optional-dependencies"])


def test_the_version_is_written_once():
    import hpo

    pyproject = _pyproject()
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hpo.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", hpo.__version__)


def test_example_sweeps_read_the_columns_their_convert_step_writes():
    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        text = path.read_text()
        header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
        data = yaml.safe_load(text).get("data", {})
        for flag, key in (("--features", "features"), ("--label", "label")):
            written = re.search(rf"{flag} (\S+)", header)
            if written:
                assert data.get(key) == written.group(1), f"{path.name}: data.{key} is not {written.group(1)}"


def test_readmes_own_data_example_is_a_valid_sweep_and_builder():
    readme = (ROOT / "README.md").read_text()
    (sweep,) = [b for b in re.findall(r"```yaml\n(.*?)```", readme, flags=re.S) if "# mysweep.yaml" in b]
    config = SweepConfig.model_validate(yaml.safe_load(sweep))
    assert config.model == "mymodels:build" and config.data.label == "target"
    (builder,) = [b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "# mymodels.py" in b]
    import ast

    (build,) = [f for f in ast.parse(builder).body if isinstance(f, ast.FunctionDef) and f.name == "build"]
    assert [a.arg for a in build.args.args] == ["params", "input_shape", "num_classes"]  # hpo's builder call
    assert set(config.space) - {"learning_rate"} == {"units"} and 'params["units"]' in builder
    # the convert line writes what the sweep reads
    convert = re.search(r"hpo data convert \S+ (\S+) --label (\S+) --validation-fraction", readme)
    assert convert and config.data.train == f"file://{convert.group(1)}/train"
    assert config.data.label == convert.group(2)
