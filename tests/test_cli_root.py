from kvtool import __version__


def test_version_prints_package_version(kvtool_cli) -> None:
    result = kvtool_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"kvtool {__version__}"


def test_unknown_command_is_a_usage_error(kvtool_cli) -> None:
    result = kvtool_cli("no-such-command")
    assert result.exit_code == 2
