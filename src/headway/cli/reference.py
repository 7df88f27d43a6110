"""The CLI reference as Markdown, written from the commands themselves (their `--help`), so the
docs site cannot drift from the CLI: `mkdocs_hooks.py` adds it to the site as `cli.md`."""

from __future__ import annotations

import click

#: The width `--help` is wrapped to in the reference (the code style's line length).
WIDTH = 100


def markdown(group: click.Group, name: str = "headway") -> str:
    """A page with the group's `--help`, then each subcommand's, in the order `--help` lists them."""
    root = _context(group, name, None)
    lines = [
        f"# `{name}` command line",
        "",
        "Generated from the CLI's own `--help` when this site is built.",
        "",
        *_section(root),
    ]
    for sub in group.list_commands(root):
        command = group.get_command(root, sub)
        if command is not None and not command.hidden:
            lines += _section(_context(command, sub, root))
    return "\n".join(lines)


def _context(command: click.Command, name: str, parent: click.Context | None) -> click.Context:
    """The context click itself would make for `command` (help options, environment prefix)."""
    settings = {"max_content_width": WIDTH, "terminal_width": WIDTH, **command.context_settings}
    return click.Context(command, info_name=name, parent=parent, **settings)


def _section(context: click.Context) -> list[str]:
    lines = [f"## `{context.command_path}`", ""]
    if context.auto_envvar_prefix and not isinstance(context.command, click.Group):
        lines += [
            f"Each option is also read from `{context.auto_envvar_prefix}_<OPTION>` "
            f"(`--some-flag` from `{context.auto_envvar_prefix}_SOME_FLAG`).",
            "",
        ]
    return [*lines, "```text", context.command.get_help(context), "```", ""]
