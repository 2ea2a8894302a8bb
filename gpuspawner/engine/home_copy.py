"""The program of a home's copy between two swarm nodes (`home_move`), run in the home's
image by `python3 -c` on each node: it imports nothing of gpuspawner, which the image
need not have.

    serve ROOT PORT              list ROOT's entries, then send the list and a tar stream
                                 of ROOT to the first connection on PORT
    fetch ROOT ADDRESS PORT      into an empty ROOT: unpack the stream from ADDRESS:PORT,
                                 list what was unpacked, exit 0 only if both lists agree

Each entry of a list is its kind (a file's SHA-256, "dir", or "link:" and its target), its
owner, group and mode: a copy that lost an owner (a home jovyan could no longer write)
does not agree.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import tarfile
from typing import Any

DIFFERENT, NOT_EMPTY = 5, 6  # fetch's exit status when the copy fails


def listed(root: str) -> dict[str, list[Any]]:
    entries: dict[str, list[Any]] = {}
    for folder, _, files in os.walk(root):
        for path in [folder, *(os.path.join(folder, name) for name in files)]:
            info = os.lstat(path)
            if os.path.islink(path):
                what = "link:" + os.readlink(path)
            elif path == folder:
                what = "dir"
            else:
                digest = hashlib.sha256()  # (file_digest: Python 3.11, which images may lack)
                with open(path, "rb") as file:
                    while chunk := file.read(1 << 20):
                        digest.update(chunk)
                what = digest.hexdigest()
            entries[os.path.relpath(path, root)] = [what, info.st_uid, info.st_gid, info.st_mode]
    return entries


def serve(root: str, port: int) -> None:
    server = socket.create_server(("", port))
    connection, _ = server.accept()
    with connection, connection.makefile("wb") as stream:
        stream.write((json.dumps(listed(root)) + "\n").encode())
        with tarfile.open(fileobj=stream, mode="w|") as tar:
            tar.add(root, arcname=".")


def fetch(root: str, address: str, port: int) -> int:
    if os.listdir(root):
        return NOT_EMPTY
    connection = socket.create_connection((address, port), timeout=600)
    with connection, connection.makefile("rb") as stream:
        expected = json.loads(stream.readline())
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            # owners kept ("tar"; Python 3.14's default, "data", would drop them)
            kept: dict[str, Any] = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
            tar.extractall(root, numeric_owner=True, **kept)
    return 0 if listed(root) == expected else DIFFERENT


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(fetch(sys.argv[2], sys.argv[3], int(sys.argv[4])))
