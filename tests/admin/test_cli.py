"""The `gpuspawner` command line: its subcommands and the values it refuses."""

from importlib.metadata import version

import pytest

from gpuspawner.admin.cli import build_parser, main


def test_each_subcommand_runs_the_module_of_its_name():
    parser = build_parser()
    for command in ("doctor", "status", "cleanup", "homes", "usage"):
        assert parser.parse_args([command]).command == command
    args = parser.parse_args(["cleanup", "--delete-home", "h1", "--delete-home", "h2", "--yes"])
    assert (args.delete_home, args.db_url, args.config) == (["h1", "h2"], "", None)
    args = parser.parse_args(["homes", "-f", "hub.py", "--db-url", "sqlite:///x.sqlite"])
    assert (str(args.config), args.db_url, args.prefix) == ("hub.py", "sqlite:///x.sqlite", "")
    args = parser.parse_args(["cleanup", "--label", "a=1", "--label", "b", "--yes"])
    assert (args.label, args.yes, args.prefix) == (["a=1", "b"], True, "")
    args = parser.parse_args(["status", "-f", "hub.py", "--simulate", "4"])
    assert (str(args.config), args.simulate, args.simulated_load) == ("hub.py", 4, "")
    args = parser.parse_args(["usage"])
    assert (args.since, args.by, args.format, args.ledger) == ("7d", "user", "table", None)


@pytest.mark.parametrize("value", ["-1", "four"])
def test_a_simulated_gpu_count_must_be_a_whole_number(value, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["doctor", "--simulate", value])
    assert exited.value.code == 2
    assert "--simulate" in capsys.readouterr().err


def test_version_and_a_missing_command(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"gpuspawner {version('gpuspawner')}\n"
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2
