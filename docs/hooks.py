"""mkdocs hooks (mkdocs.yml `hooks:`): the destinations page is the registry, and the CLI
reference sees every command.

- ``<!-- destinations -->`` becomes a table of `connector.destinations.registry.KINDS`.
- `connector`'s commands load lazily (`connector.cli._LAZY`); mkdocs-click lists only the
  loaded ones, so every command is loaded before the pages are read.
"""

from __future__ import annotations

from typing import Any


def on_config(config: Any) -> Any:
    import click

    from connector.cli import main

    context = click.Context(main)
    for name in main.list_commands(context):
        main.get_command(context, name)
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return markdown.replace("<!-- destinations -->", destinations_table())


def destinations_table() -> str:
    """One row per kind of `KINDS`, as the registry describes it."""
    from connector.destinations.registry import KINDS

    rows = [
        "| kind | what | in a job file | `export --format` | modes | `deletes = \"mark\"` "
        "| tables written at once | extra |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in KINDS:
        if kind.schemes:
            chosen = ", ".join(f'`{kind.job_key} = "{s}:///…"`' for s in kind.schemes)
        elif kind.job_key == "url":
            chosen = '`url = "<SQLAlchemy URL>"`'
        elif kind.job_key:
            chosen = f'`{kind.job_key} = "<folder or URL>"`'
        else:
            chosen = "—"
        caps = kind.capabilities
        rows.append(
            f"| `{kind.name}` | {kind.title} | {chosen} | "
            f"{f'`{kind.export_format}`' if kind.export_format else '—'} | "
            f"{', '.join(sorted(caps.modes))} | {'yes' if caps.marks else 'no'} | "
            f"{'several' if caps.parallel_writes else 'one at a time'} | "
            f"{f'`{kind.extra}`' if kind.extra else 'none (core)'} |"
        )
    return "\n".join(rows) + "\n"
