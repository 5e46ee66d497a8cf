from kvtool import __version__


def test_version_prints_package_version(kvtool_cli) -> None:
    result = kvtool_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"kvtool {__version__}"


def test_unknown_command_is_a_usage_error(kvtool_cli) -> None:
    result = kvtool_cli("no-such-command")
    assert result.exit_code == 2


def test_help_lists_every_command(kvtool_cli) -> None:
    from kvtool.cli import COMMAND_MODULES

    result = kvtool_cli("--help")
    assert result.exit_code == 0
    for name in COMMAND_MODULES:
        assert f" {name} " in result.stdout


def test_a_named_command_builds_only_its_own_sub_package(monkeypatch) -> None:
    import typer.main

    from kvtool.cli import COMMAND_MODULES, build_app

    def names(args: list[str]) -> set[str]:
        group = typer.main.get_group(build_app(args))
        return set(group.commands)

    assert names(["audit", "x.sh"]) == {"audit"}
    assert names(["rule", "VG002"]) == {"rule"}
    assert names(["size", "--model", "m"]) == {"size"}
    assert names(["--help"]) == set(COMMAND_MODULES)
    # Shell completion may complete any command, whatever the first word is.
    monkeypatch.setenv("_KVTOOL_COMPLETE", "complete_bash")
    assert names(["audit"]) == set(COMMAND_MODULES)
