"""Where benchmark data files are looked for.

Lookup order for a file (first hit wins):

1. the ``data_dir`` argument of :func:`fairopt.datasets.load` / :func:`~fairopt.datasets.load_frame`;
2. the directory in the environment variable ``FAIROPT_DATA``;
3. the user data directory (:func:`user_data_dir`), by default ``~/.local/share/fairopt``;
4. data embedded in the package (only UCI Adult, CC BY 4.0).

fairopt never downloads data: a missing file is a :class:`FileNotFoundError` that names
the file and the directories where it can be put.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Iterator, Sequence

__all__ = ["ENV_VAR", "user_data_dir", "search_dirs", "find_data_file", "open_data_file"]

ENV_VAR = "FAIROPT_DATA"


def user_data_dir() -> Path:
    """The per-user data directory of fairopt (no dependency on platformdirs).

    Windows: ``%LOCALAPPDATA%\\fairopt``; macOS: ``~/Library/Application Support/fairopt``;
    elsewhere ``$XDG_DATA_HOME/fairopt``, by default ``~/.local/share/fairopt``.
    """
    if sys.platform.startswith("win") and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "fairopt"
    if sys.platform == "darwin":
        return Path(os.path.expanduser("~/Library/Application Support/fairopt"))
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg else Path(os.path.expanduser("~/.local/share"))
    return base / "fairopt"


def search_dirs(data_dir: str | os.PathLike | None = None) -> list[tuple[str, Path | None]]:
    """The three user-facing places, in lookup order, as (description, path or None)."""
    env = os.environ.get(ENV_VAR)
    return [
        ("data_dir argument", Path(data_dir).expanduser() if data_dir is not None else None),
        (f"${ENV_VAR}", Path(env).expanduser() if env else None),
        ("user data directory", user_data_dir()),
    ]


def _embedded(filename: str):
    """The packaged resource ``_data/filename`` (a Traversable), or None."""
    resource = resources.files("fairopt.datasets").joinpath("_data", filename)
    return resource if resource.is_file() else None


def find_data_file(filenames: Sequence[str], data_dir: str | os.PathLike | None = None) -> Path | None:
    """Path of the first of ``filenames`` found in the search directories, else None.

    Embedded resources are not returned here (see :func:`open_data_file`).
    """
    for _, directory in search_dirs(data_dir):
        if directory is None:
            continue
        for filename in filenames:
            candidate = directory / filename
            if candidate.is_file():
                return candidate
    return None


def _missing_file_message(dataset: str, filenames: Sequence[str], data_dir: str | os.PathLike | None) -> str:
    places = []
    for description, directory in search_dirs(data_dir):
        where = str(directory) if directory is not None else "not set"
        places.append(f"  - {description}: {where}")
    alternatives = " or ".join(repr(f) for f in filenames)
    return (
        f"dataset {dataset!r}: file {alternatives} not found. fairopt does not download data; put the file in "
        f"one of these places (searched in this order):\n" + "\n".join(places) +
        f"\nFor example: mkdir -p {user_data_dir()} && cp {filenames[0]} {user_data_dir()}/ , or pass "
        f"data_dir=..., or set {ENV_VAR}=/path/to/dir."
    )


@contextmanager
def open_data_file(
    dataset: str, filenames: Sequence[str], data_dir: str | os.PathLike | None = None, embedded: bool = False
) -> Iterator[Path]:
    """Context manager yielding a real path to the first file found (search dirs, then
    embedded data when ``embedded``); FileNotFoundError naming the file and the places."""
    path = find_data_file(filenames, data_dir)
    if path is not None:
        yield path
        return
    if embedded:
        for filename in filenames:
            resource = _embedded(filename)
            if resource is not None:
                with resources.as_file(resource) as real_path:
                    yield Path(real_path)
                return
    raise FileNotFoundError(_missing_file_message(dataset, filenames, data_dir))
