"""README.md's command lines, scripts and settings exist as written (its curl session runs in tests/e2e)."""

import re
from argparse import ArgumentParser
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def command_lines():
    """(command, the rest of its line and of the lines continuing it) for every `manage.py NAME …` in README."""
    found, lines = [], README.splitlines()
    for n, line in enumerate(lines):
        for match in re.finditer(r"manage\.py (?!…)([a-z_]+)(.*)", line):
            rest = match.group(2)
            for following in lines[n + 1 :]:  # a usage line continued: "   | search [--state S]"
                if not re.match(r"\s+[|\[]", following):
                    break
                rest += following
            found.append((match.group(1), rest))
    return found


def option_strings(parser: ArgumentParser):
    """Every option a command takes, its subcommands' included."""
    options = set()
    for action in parser._actions:
        options.update(action.option_strings)
        if isinstance(action.choices, dict):  # subcommands
            for subparser in action.choices.values():
                options |= option_strings(subparser)
    return options


COMMANDS = command_lines()


def test_readme_shows_the_commands():
    assert {"serve", "invariants", "sweep", "deliver", "promises", "createsuperuser"} <= {c for c, _ in COMMANDS}


@pytest.mark.parametrize(("command", "rest"), COMMANDS, ids=[f"{c}{r[:40]}" for c, r in COMMANDS])
def test_each_command_line_names_a_command_and_options_it_takes(command, rest):
    commands = get_commands()
    assert command in commands, f"README shows `manage.py {command}`, which does not exist"
    parser = load_command_class(commands[command], command).create_parser("manage.py", command)
    unknown = set(re.findall(r"(--[a-z][a-z-]*)", rest)) - option_strings(parser)
    assert not unknown, f"`manage.py {command}` takes no {sorted(unknown)}"


SCRIPTS = sorted(set(re.findall(r"(?<![\w./-])(bin/[\w-]+)", README)))


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_script_it_names_exists_and_is_executable(script):
    path = ROOT / script
    assert path.is_file() and path.stat().st_mode & 0o111, f"README names {script}, which is not an executable"


READ_BY_THE_SDKS = {"TOKEN"}  # RESONATE_TOKEN: what the SDKs send as their bearer token (README's auth section)
READ_BY_THE_TESTS = {"TEST_POSTGRES_URL"}  # the PostgreSQL of tests/failover in the SQLite pass (tests/faults.py)


def test_each_setting_it_names_is_read_by_the_code():
    from floor.conf import DEFAULTS

    code = "\n".join(
        path.read_text()
        for pattern in ("floor/*.py", "resonate_site/**/*.py", "bin/*", "deploy/*", "*/management/commands/*.py")
        for path in ROOT.glob(pattern)
        if path.is_file()
    )
    named = set(re.findall(r"RESONATE_([A-Z][A-Z_]*[A-Z])", README)) - READ_BY_THE_SDKS - READ_BY_THE_TESTS
    unread = {name for name in named if name not in DEFAULTS and f"RESONATE_{name}" not in code}
    assert not unread, f"README names settings nothing reads: {sorted(unread)}"
