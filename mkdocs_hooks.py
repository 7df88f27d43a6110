"""mkdocs hooks: the CLI reference (`cli.md`) is generated from the CLI at build time."""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from headway.cli.main import cli
from headway.cli.reference import markdown


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, "cli.md", content=markdown(cli)))
    return files
