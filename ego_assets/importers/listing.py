"""Paged, ordered listing of a source folder or ``s3://`` prefix (universal-pathlib).

`list_after` returns at most ``limit`` file names (POSIX, relative to the source root)
that sort after a cursor name, in byte order, without listing the whole source:

* S3: ``ListObjectsV2`` with ``StartAfter`` and ``MaxKeys`` (one request per 1,000 names);
* local: a depth-first walk in name order that descends only into the folders on or
  after the cursor's path and stops as soon as the page is full.

A sensor keeps the last name of a page as its cursor, so each tick costs one page
whatever the size of the source (338k EgoDex episodes are ~700k files).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from upath import UPath

from ego_assets.storage import is_local

S3_PAGE = 1000  # ListObjectsV2 answers at most 1,000 keys per request


def list_after(root: UPath, after: str, limit: int) -> list[str]:
    """Up to ``limit`` relative file names under ``root`` sorting after ``after`` ("" = first)."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    if is_local(root):
        names = []
        for name in _walk_local(Path(root.path), "", after):
            names.append(name)
            if len(names) == limit:
                break
        return names
    return _list_s3(root, after, limit)


def iter_after(root: UPath, after: str = "", page: int = S3_PAGE) -> Iterator[str]:
    """Every file name after ``after``, fetched ``page`` names at a time."""
    while True:
        names = list_after(root, after, page)
        yield from names
        if len(names) < page:
            return
        after = names[-1]


def _walk_local(folder: Path, prefix: str, after: str) -> Iterator[str]:
    """Files below ``folder`` in the order of their relative names, those <= ``after`` skipped.

    Names compare as S3 keys do (the whole relative path; code point order is UTF-8 byte
    order), so a folder is entered only when a name inside it can sort after the cursor.
    Symlinks and special files are not listed.
    """
    try:
        entries = [(name, e) for e in os.scandir(folder) if (name := _sort_name(e))]
    except (FileNotFoundError, NotADirectoryError):
        return
    for name, entry in sorted(entries, key=lambda pair: pair[0]):
        rel = prefix + name
        if name.endswith("/"):
            if rel < after and not after.startswith(rel):
                continue  # every name inside sorts before the cursor
            yield from _walk_local(Path(entry.path), rel, after)
        elif rel > after:
            yield rel


def _sort_name(entry: os.DirEntry[str]) -> str | None:
    """A folder sorts as ``name/`` (its keys' common prefix), a file as ``name``; else None."""
    if entry.is_dir(follow_symlinks=False):
        return entry.name + "/"
    return entry.name if entry.is_file(follow_symlinks=False) else None


def _list_s3(root: UPath, after: str, limit: int) -> list[str]:
    """One or more ``ListObjectsV2`` pages of the prefix ``root`` after ``after``."""
    fs = root.fs
    bucket, _, key_prefix = root.path.partition("/")
    key_prefix = key_prefix.rstrip("/") + "/" if key_prefix.strip("/") else ""
    names: list[str] = []
    start = key_prefix + after if after else ""
    token = None
    while len(names) < limit:
        request = {
            "Bucket": bucket,
            "Prefix": key_prefix,
            "MaxKeys": min(S3_PAGE, limit - len(names)),
        }
        if token:
            request["ContinuationToken"] = token
        elif start:
            request["StartAfter"] = start
        answer = fs.call_s3("list_objects_v2", **request)
        names.extend(obj["Key"][len(key_prefix) :] for obj in answer.get("Contents", []))
        token = answer.get("NextContinuationToken")
        if not answer.get("IsTruncated") or not token:
            break
    return names[:limit]
