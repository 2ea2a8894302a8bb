"""The line as written down: what a restarted hub finds of the line of the hub before it."""

from gpuspawner.records.ledger import Ledger
from gpuspawner.records.line import LineRecord, Waited

ANN = Waited(1, 10, "ann", "train", "Two H100s", "2 GPUs", 1000.0)
BOB = Waited(2, 11, "bob", "", "One H100", "1 GPU", 900.0)


def test_what_was_waiting_when_the_hub_died_is_found_once(tmp_path):
    path = tmp_path / "usage.sqlite"
    crashed = LineRecord(path)  # never closed: as after kill -9
    crashed.joined(ANN)
    crashed.joined(BOB)
    crashed.joined(Waited(3, 12, "cat", "", "One H100", "1 GPU", 950.0))
    crashed.left(3)  # started, cancelled or gave up: not waiting any more
    restarted = LineRecord(path)
    assert restarted.take_all() == [BOB, ANN]
    assert restarted.take_all() == []


def test_the_line_shares_the_ledgers_file_without_touching_its_grants(tmp_path):
    path = tmp_path / "usage.sqlite"
    ledger = Ledger(path)
    line = LineRecord(path)
    line.joined(ANN)
    assert ledger.records(since=0) == []
    assert LineRecord(path).take_all() == [ANN]
