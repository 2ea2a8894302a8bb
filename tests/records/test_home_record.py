"""Each user's home node, written down as it is made and read back by the next hub."""

from gpuspawner.core.homes import Home
from gpuspawner.records.homes import HomeRecord


def test_homes_are_read_back_and_a_later_use_updates_the_same_row(tmp_path):
    record = HomeRecord(tmp_path / "usage.sqlite")
    ann = Home("ann", "gpuspawner-home-ann", "n2", 100.0, 100.0)
    record.save(ann)
    record.save(Home("bob", "gpuspawner-home-bob", "n1", 150.0, 150.0))
    record.save(ann.used(400.0))
    record.close()
    again = HomeRecord(tmp_path / "usage.sqlite")
    assert again.all() == {
        "ann": Home("ann", "gpuspawner-home-ann", "n2", 100.0, 400.0),
        "bob": Home("bob", "gpuspawner-home-bob", "n1", 150.0, 150.0),
    }
