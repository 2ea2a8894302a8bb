"""The program of a home's copy between two swarm nodes (`home_move`), run in the home's
image by `python3 -c` on each node: it imports nothing of gpuspawner, which the image
need not have.

    serve ROOT PORT SECRET          list ROOT's entries, then send the list and a tar
                                    stream of ROOT to the first connection on PORT that
                                    says SECRET (others are closed unanswered)
    fetch ROOT ADDRESS PORT SECRET  into an empty ROOT: unpack the stream from
                                    ADDRESS:PORT, list what was unpacked, exit 0 only if
                                    both lists agree (else empty ROOT again)

Each entry of a list is its kind (a regular file's SHA-256, "dir", "link:" and its target,
or the kind of a special file), its owner, group and mode: a copy that lost an owner or a
mode bit (a home jovyan could no longer write) does not agree. Sockets are a running
program's, not files to keep: neither listed nor copied.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import socket
import stat
import sys
import tarfile
import time
from typing import Any

DIFFERENT, NOT_EMPTY = 5, 6  # fetch's exit status when the copy fails
CONNECT_FOR = 120  # seconds fetch tries to reach serve, which may still be starting


def listed(root: str) -> dict[str, list[Any]]:
    entries: dict[str, list[Any]] = {}
    for folder, folders, files in os.walk(root):
        links = [name for name in folders if os.path.islink(os.path.join(folder, name))]
        for path in [folder, *(os.path.join(folder, name) for name in [*files, *links])]:
            info = os.lstat(path)
            kind = _kind(path, info.st_mode)
            if kind is not None:
                entries[os.path.relpath(path, root)] = [
                    kind,
                    info.st_uid,
                    info.st_gid,
                    info.st_mode,
                ]
    return entries


def _kind(path: str, mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "link:" + os.readlink(path)
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISSOCK(mode):
        return None
    if not stat.S_ISREG(mode):
        return "special:" + oct(stat.S_IFMT(mode))  # a pipe, a device: never opened
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return str(digest.hexdigest())


def serve(root: str, port: int, secret: str) -> None:
    server = socket.create_server(("", port))
    while True:
        connection, _ = server.accept()
        with connection:
            said = connection.recv(len(secret) + 1).decode(errors="replace").strip()
            if not hmac.compare_digest(said, secret):
                continue  # someone else found the port: nothing for them
            with connection.makefile("wb") as stream:
                stream.write((json.dumps(listed(root)) + "\n").encode())
                with tarfile.open(fileobj=stream, mode="w|") as tar:
                    tar.add(root, arcname=".")
            return


def _keep_modes(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """The "tar" filter's checks (no absolute paths, nothing out of ROOT), but its mode
    kept: the filter drops group and other write, which a home's files may have."""
    checked = tarfile.tar_filter(member, path)
    return checked.replace(mode=member.mode, deep=False) if checked is not None else None


def fetch(root: str, address: str, port: int, secret: str) -> int:
    if os.listdir(root):
        return NOT_EMPTY
    connection = _connect(address, port)
    connection.sendall((secret + "\n").encode())
    with connection, connection.makefile("rb") as stream:
        expected = json.loads(stream.readline())
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            safe: dict[str, Any] = {"filter": _keep_modes} if hasattr(tarfile, "tar_filter") else {}
            tar.extractall(root, numeric_owner=True, **safe)
    if listed(root) == expected:
        return 0
    for name in os.listdir(root):  # ours alone (ROOT was empty): the next try starts clean
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    return DIFFERENT


def _connect(address: str, port: int) -> socket.socket:
    deadline = time.monotonic() + CONNECT_FOR
    while True:
        try:
            return socket.create_connection((address, port), timeout=600)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(fetch(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
