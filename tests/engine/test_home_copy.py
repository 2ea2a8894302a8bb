"""The program that copies a home between two swarm nodes, run here on two folders: what it
unpacks agrees with what it served, owners and modes included, and it never unpacks over a
home that is not empty."""

import os
import socket
import threading

from gpuspawner.engine.home_copy import NOT_EMPTY, fetch, listed, serve


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def home_in(folder):
    (folder / "work").mkdir(parents=True)
    (folder / "work" / "result.txt").write_text("alice's result\n")
    (folder / ".bashrc").write_text("export X=1\n")
    (folder / "latest").symlink_to("work/result.txt")
    (folder / "work" / "big.bin").write_bytes(os.urandom(3 << 20))
    if os.geteuid() == 0:  # as the notebook user owns a home
        for path in (folder, folder / "work", *folder.rglob("*")):
            os.lchown(path, 1000, 100)
    return folder


def copied(source, target) -> int:
    port = free_port()
    serving = threading.Thread(target=serve, args=(str(source), port))
    serving.start()
    try:
        for _ in range(100):  # until it listens
            try:
                return fetch(str(target), "127.0.0.1", port)
            except ConnectionRefusedError:
                serving.join(0.05)
        raise AssertionError("the serving side never listened")
    finally:
        serving.join(10)


def test_a_copy_agrees_with_its_source_owners_and_modes_included(tmp_path):
    source = home_in(tmp_path / "n2")
    target = tmp_path / "n3"
    target.mkdir()
    assert copied(source, target) == 0
    assert listed(str(target)) == listed(str(source))
    assert (target / "work" / "result.txt").read_text() == "alice's result\n"
    assert os.readlink(target / "latest") == "work/result.txt"
    if os.geteuid() == 0:
        assert (target.stat().st_uid, (target / "work").stat().st_gid) == (1000, 100)


def test_a_home_that_is_not_empty_is_never_unpacked_over(tmp_path):
    target = tmp_path / "n3"
    target.mkdir()
    (target / "notes.txt").write_text("made on n3, away from home\n")
    port = free_port()
    assert fetch(str(target), "127.0.0.1", port) == NOT_EMPTY  # before any connection
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
