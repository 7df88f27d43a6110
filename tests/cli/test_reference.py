"""The CLI reference on the docs site is the CLI's own help: every command, every option."""

from __future__ import annotations

from headway.cli.main import cli
from headway.cli.reference import markdown


def test_the_reference_has_every_command_and_every_option_of_each() -> None:
    page = markdown(cli)
    context = cli.make_context("headway", [], resilient_parsing=True)
    commands = cli.list_commands(context)
    assert {"serve", "demo", "bench", "trace", "plan", "profile"} <= set(commands)
    for name in commands:
        command = cli.get_command(context, name)
        assert command is not None
        section = page.split(f"## `headway {name}`", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            for flag in param.opts:
                if flag.startswith("--"):
                    assert flag in section, (name, flag)
    assert "`HEADWAY_<OPTION>`" in page.split("## `headway serve`", 1)[1]
