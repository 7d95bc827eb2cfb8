"""The queue's files in the sweeps' storage: ``STORAGE/_queue/entries/``, ``settings.json``, the standby's.

``entries/NAME.json`` is one entry, ``settings.json`` the queue's settings, ``standby.json`` the standby
runner the dispatcher started last, ``standby/JOB_ID.json`` the sweep handed to it (written by the
dispatcher) and ``standby/JOB_ID.claim.json`` the runner's claim of it (written by the runner).

The queue lives with the sweeps, not in a Ray process: a head that restarts finds every entry again.
Each entry is its own file, written whole (a temporary file renamed over it on a local storage; one PUT on
object storage), so a reader never sees half an entry. Two writers of one entry are kept apart by role:
``hpo submit`` creates it, ``hpo cancel`` only sets ``cancel_requested``/cancels a queued one, and the
dispatcher owns every other change.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from hpo.errors import ConfigError
from hpo.queue.entry import ENTRY_VERSION, Assignment, Claim, QueueEntry, QueueSettings, StandbyRecord
from hpo.storage import Storage

#: The queue's directory under the storage.
QUEUE_DIR = "_queue"


class QueueStore:
    """Reads and writes the queue of one storage.

    Args:
        storage: The sweeps' storage (a path, ``file://``, ``s3://`` or ``gs://`` URI, or a parsed one).
    """

    def __init__(self, storage: str | Storage) -> None:
        self.storage = Storage.parse(storage)

    def _path(self, *parts: str) -> str:
        _, base = self.storage.filesystem()
        return "/".join([base, QUEUE_DIR, *parts])

    def _read(self, path: str) -> str | None:
        import pyarrow.fs as pafs

        fs, _ = self.storage.filesystem()
        if fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with fs.open_input_stream(path) as src:
            return src.read().decode()

    def _write(self, path: str, text: str) -> None:
        fs, _ = self.storage.filesystem()
        parent = path.rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        if self.storage.remote:
            with fs.open_output_stream(path) as out:
                out.write(text.encode())
            return
        tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.tmp"
        with fs.open_output_stream(tmp) as out:
            out.write(text.encode())
        fs.move(tmp, path)

    def entries(self) -> list[QueueEntry]:
        """Every entry, in no particular order (see :func:`hpo.queue.in_order`).

        Raises:
            ConfigError: For an entry file this hpo cannot read (naming the file).
        """
        import pyarrow.fs as pafs

        fs, _ = self.storage.filesystem()
        selector = pafs.FileSelector(self._path("entries"), allow_not_found=True)
        found = []
        for info in fs.get_file_info(selector):
            if info.type == pafs.FileType.File and info.base_name.endswith(".json") \
                    and not info.base_name.startswith("."):
                entry = self.get(info.base_name[: -len(".json")])
                if entry is not None:
                    found.append(entry)
        return found

    def get(self, name: str) -> QueueEntry | None:
        """The entry of sweep ``name``, or None."""
        path = self._path("entries", f"{name}.json")
        text = self._read(path)
        if text is None:
            return None
        try:
            entry = QueueEntry.model_validate_json(text)
        except ValidationError as err:
            raise ConfigError(f"{path}: not a queue entry this hpo reads ({err.errors()[0]['msg']}); "
                              "remove it or upgrade hpo") from None
        if entry.version > ENTRY_VERSION:
            raise ConfigError(f"{path}: version: {entry.version} is newer than this hpo reads "
                              f"({ENTRY_VERSION}); upgrade hpo")
        return entry

    def put(self, entry: QueueEntry) -> None:
        """Writes ``entry`` whole (replacing the entry of the same name)."""
        self._write(self._path("entries", f"{entry.name}.json"), entry.model_dump_json(indent=1))

    def settings(self) -> QueueSettings:
        """The queue's settings (defaults when none were written)."""
        text = self._read(self._path("settings.json"))
        return QueueSettings() if text is None else QueueSettings.model_validate(json.loads(text))

    def put_settings(self, settings: QueueSettings) -> None:
        """Writes the queue's settings."""
        self._write(self._path("settings.json"), settings.model_dump_json(indent=1))

    def standby(self) -> StandbyRecord | None:
        """The queue's standby runner as the dispatcher last started it (None: none started)."""
        text = self._read(self._path("standby.json"))
        if text is None:
            return None
        try:
            return StandbyRecord.model_validate_json(text)
        except ValidationError:
            return None  # the dispatcher's own note: a new runner replaces one it cannot read

    def put_standby(self, record: StandbyRecord) -> None:
        """Records the queue's standby runner."""
        self._write(self._path("standby.json"), record.model_dump_json(indent=1))

    def assignment(self, job_id: str) -> Assignment | None:
        """The sweep handed to standby runner ``job_id``, or None while it has none."""
        text = self._read(self._path("standby", f"{job_id}.json"))
        return None if text is None else Assignment.model_validate_json(text)

    def assign(self, job_id: str, assignment: Assignment) -> None:
        """Hands ``assignment`` to standby runner ``job_id`` (it polls for this file)."""
        self._write(self._path("standby", f"{job_id}.json"), assignment.model_dump_json(indent=1))

    def claim(self, claim: Claim) -> None:
        """Records that standby runner ``claim.job_id`` took the sweep handed to it (the runner's file alone)."""
        self._write(self._path("standby", f"{claim.job_id}.claim.json"), claim.model_dump_json(indent=1))

    def claimed(self, job_id: str) -> Claim | None:
        """The claim of standby runner ``job_id``, or None while it has claimed nothing."""
        text = self._read(self._path("standby", f"{job_id}.claim.json"))
        return None if text is None else Claim.model_validate_json(text)
