"""The program that copies a home between two swarm nodes, run here on two folders: what it
unpacks agrees with what it served, owners and modes included, and it never unpacks over a
home that is not empty."""

import os
import socket
import threading
import time

from gpuspawner.engine.home_copy import NOT_EMPTY, fetch, listed, serve

SECRET = "0123456789abcdef"


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
    (folder / "shared.txt").write_text("group-writable, as docker-stacks homes are\n")
    (folder / "shared.txt").chmod(0o664)
    (folder / "pipe").mkdir()
    os.mkfifo(folder / "pipe" / "fifo")  # listed by its kind, never opened
    (folder / "work-link").symlink_to("work", target_is_directory=True)
    agent = socket.socket(socket.AF_UNIX)  # a running program's socket: not copied
    agent.bind(str(folder / "agent.sock"))
    agent.close()
    if os.geteuid() == 0:  # as the notebook user owns a home
        for path in (folder, folder / "work", *folder.rglob("*")):
            os.lchown(path, 1000, 100)
    return folder


def copied(source, target) -> int:
    """`fetch` from a `serve` on this machine (it tries until the server listens)."""
    port = free_port()
    serving = threading.Thread(target=serve, args=(str(source), port, SECRET))
    serving.start()
    try:
        return fetch(str(target), "127.0.0.1", port, SECRET)
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
    assert os.readlink(target / "work-link") == "work"
    assert (target / "shared.txt").stat().st_mode & 0o777 == 0o664
    assert "pipe/fifo" in listed(str(target)) and not (target / "agent.sock").exists()
    if os.geteuid() == 0:
        assert (target.stat().st_uid, (target / "work").stat().st_gid) == (1000, 100)


def test_a_home_that_is_not_empty_is_never_unpacked_over(tmp_path):
    target = tmp_path / "n3"
    target.mkdir()
    (target / "notes.txt").write_text("made on n3, away from home\n")
    port = free_port()
    assert fetch(str(target), "127.0.0.1", port, SECRET) == NOT_EMPTY  # before any connection
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_only_a_connection_that_says_the_secret_gets_the_home(tmp_path):
    """The serving port is open on its node: another user's notebook that finds it gets
    nothing, and the copy still gets the home after."""
    source = home_in(tmp_path / "n2")
    target = tmp_path / "n3"
    target.mkdir()
    port = free_port()
    serving = threading.Thread(target=serve, args=(str(source), port, SECRET))
    serving.start()
    try:
        with _connected(port) as snoop:
            snoop.sendall(b"not-the-secret\n")
            assert snoop.recv(100) == b""  # closed unanswered
        assert fetch(str(target), "127.0.0.1", port, SECRET) == 0
    finally:
        serving.join(10)
    assert listed(str(target)) == listed(str(source))


def _connected(port: int) -> socket.socket:
    """A connection to the serving side, once it listens."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=10)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline, "the serving side never listened"
            time.sleep(0.05)
