"""What a queued sweep needs on the cluster, packed into one zip kept in the sweeps' storage.

``hpo submit`` packs the sweep file, the model module (the top-level package it belongs to, or the single
module file, when it lies under the submitting directory) and the local datasets the sweep reads from under
that directory (``data.train``/``data.validation`` as ``file://`` URLs). The zip is named after its content
(``STORAGE/_queue/packages/SHA.zip``), so it survives a head restart and two submissions of the same code
share it. The dispatcher hands it to Ray as the job's ``runtime_env`` ``working_dir``: a zip on object
storage by its URI (Ray downloads it on the node), a zip on a local or shared disk by its path (Ray uploads
it to the cluster when the job is submitted). A dataset under the directory is read in the job from the
unpacked copy (the job's ``hpo tune`` gets ``--set data.train=file://$PWD/…``).
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.queue.store import QUEUE_DIR
from hpo.storage import Storage

#: Ray's documented cap on a ``working_dir`` package.
MAX_PACKAGE_BYTES = 100 * 1024 * 1024
#: A file at the zip's top level, so the top level is never one directory (Ray strips such a directory
#: when it unpacks a zip downloaded from object storage, and not one uploaded from a disk).
MANIFEST = "hpo-package.json"
#: Top-level packages that come with hpo on the cluster (never packed from a checkout of hpo).
SHIPPED = frozenset({"hpo"})
_DATA_KEYS = ("train", "validation")


@dataclass(frozen=True)
class SweepInputs:
    """The files a sweep reads from the submitting directory, as paths relative to it.

    Attributes:
        root: The submitting directory (the job's working directory on the cluster).
        sweep_file: The sweep file.
        model: The model's module file, or its top-level package directory (empty: hpo's or installed).
        data: ``data.<key>`` → the dataset's path, for the local datasets under ``root``.
    """

    root: Path
    sweep_file: str
    model: list[str] = field(default_factory=list)
    data: dict[str, str] = field(default_factory=dict)

    def paths(self) -> list[str]:
        """Every input, the sweep file first."""
        return [self.sweep_file, *self.model, *self.data.values()]

    def overrides(self) -> list[str]:
        """The ``hpo tune`` flags that point a packed dataset at its unpacked copy in the job."""
        return [f"--set=data.{key}=file://$PWD/{path}" for key, path in sorted(self.data.items())]


def _under(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None


def sweep_inputs(file: Path, config: SweepConfig, root: Path) -> SweepInputs:
    """The inputs of sweep ``file`` found under ``root``.

    Raises:
        ConfigError: For a partitioned sweep (one file per partition goes on the queue instead).
    """
    if config.data.partitions:
        raise ConfigError(f"{file}: data.partitions: a partitioned sweep cannot be queued yet; "
                          "submit one sweep file per partition (data.train)")
    rel = _under(file, root)
    if rel is None:
        raise ConfigError(f"{file}: (file): not under the submitting directory {root}; "
                          "run hpo submit from the directory that holds the sweep file and its model")
    module = config.model.split(":", 1)[0]
    top = module.split(".", 1)[0]
    model: list[str] = []
    if top not in SHIPPED:
        as_dir = root / top
        as_file = root / f"{top}.py"
        if as_dir.is_dir() and (as_dir / "__init__.py").is_file():
            model = [top]
        elif as_file.is_file():
            model = [f"{top}.py"]
    data: dict[str, str] = {}
    for key in _DATA_KEYS:
        url = getattr(config.data, key)
        if isinstance(url, str) and url.startswith("file://"):
            inside = _under(Path(url[len("file://"):]), root)
            if inside is not None:
                data[key] = inside
    return SweepInputs(root, rel, model, data)


def _files(root: Path, rel: str) -> list[Path]:
    path = root / rel
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def build(inputs: SweepInputs) -> bytes:
    """The zip of ``inputs`` (same content, same bytes).

    Raises:
        ConfigError: A package over Ray's cap (its datasets belong in object storage).
    """
    out = io.BytesIO()
    total = 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        manifest = {"sweep_file": inputs.sweep_file, "model": inputs.model, "data": inputs.data}
        zf.writestr(zipfile.ZipInfo(MANIFEST, (1980, 1, 1, 0, 0, 0)), json.dumps(manifest, sort_keys=True))
        for rel in dict.fromkeys(inputs.paths()):
            for path in _files(inputs.root, rel):
                total += path.stat().st_size
                if total > MAX_PACKAGE_BYTES:
                    raise ConfigError(
                        f"{inputs.root / inputs.sweep_file}: data: the sweep's files under {inputs.root} pass "
                        f"{MAX_PACKAGE_BYTES // 2**20} MiB (Ray's cap on a job's files); put the dataset in "
                        "object storage (s3://, gs://) and point data.train at it")
                info = zipfile.ZipInfo(path.relative_to(inputs.root).as_posix(), (1980, 1, 1, 0, 0, 0))
                info.external_attr = 0o644 << 16
                zf.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
    return out.getvalue()


def store_package(storage: Storage, content: bytes) -> str:
    """Writes a package under ``STORAGE/_queue/packages/`` (once per content); returns its URL."""
    name = f"{hashlib.sha256(content).hexdigest()[:20]}.zip"
    fs, base = storage.filesystem()
    import pyarrow.fs as pafs

    path = f"{base}/{QUEUE_DIR}/packages/{name}"
    if fs.get_file_info(path).type != pafs.FileType.File:
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as dst:
            dst.write(content)
    return storage.url(QUEUE_DIR, "packages", name)


def working_dir(storage: Storage, package: str) -> str:
    """The ``runtime_env`` ``working_dir`` of a package: its URI on object storage, its path on a disk."""
    if storage.remote:
        return package
    return package[len("file://"):] if package.startswith("file://") else package


def read_package(storage: Storage, package: str) -> bytes:
    """The zip :func:`store_package` wrote (``package``: the URL it returned)."""
    name = package.split("?", 1)[0].rsplit("/", 1)[1]
    fs, base = storage.filesystem()
    with fs.open_input_stream(f"{base}/{QUEUE_DIR}/packages/{name}") as src:
        return src.read()


def unpack(content: bytes, into: Path) -> Path:
    """Unpacks a package into directory ``into`` (made if missing), as Ray unpacks a job's ``working_dir``."""
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(content)) as zf:
        for member in zf.namelist():  # the package's own paths: relative, never climbing out
            if member.startswith("/") or ".." in Path(member).parts:
                raise ConfigError(f"{member}: a package path outside its directory; resubmit the sweep")
        zf.extractall(into)
    return into


def remove_unpacked(content: bytes | None, into: Path) -> None:
    """Removes what :func:`unpack` put in ``into``, then its folders left empty; what others wrote there stays."""
    members = []
    if content is not None:
        with zipfile.ZipFile(io.BytesIO(content)) as zf:
            members = [m for m in zf.namelist() if not m.endswith("/")]
    for member in members:
        (into / member).unlink(missing_ok=True)
    folders = {into / parent for m in members for parent in Path(m).parents} | {into}
    for folder in sorted(folders, key=lambda p: -len(p.parts)):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
