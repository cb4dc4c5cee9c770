"""mkdocs hooks (mkdocs.yml `hooks:`): the guides are the README's sections, the
destinations page is the registry, and the CLI reference sees every command.

- ``<!-- readme: SECTION -->`` becomes the README's ``## SECTION`` up to the next ``## ``,
  its headings one level up (``<!-- readme: top -->``: what comes before the first ``## ``).
  One text, so the README and the site cannot disagree; a section that is gone fails the
  build. A link to another section's anchor points at the page that holds it; a link into
  ``docs/`` loses the prefix; an anchor no heading has fails the build.
- ``<!-- destinations -->`` becomes a table of `connector.destinations.registry.KINDS`.
- `connector`'s commands load lazily (`connector.cli._LAZY`); mkdocs-click lists only the
  loaded ones, so every command is loaded before the pages are read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from markdown.extensions.toc import slugify

README = Path(__file__).resolve().parents[1] / "README.md"
MARKER = re.compile(r"<!-- readme: (.+?) -->")

#: Section heading slug -> the page (src uri) that includes it.
_anchors: dict[str, str] = {}


def section(title: str) -> str:
    """The README's section `title` (``top``: the text before the first ``## ``)."""
    text = README.read_text()
    parts = re.split(r"^(?=## )", text, flags=re.MULTILINE)
    if title == "top":
        return parts[0]
    for part in parts[1:]:
        if part.splitlines()[0] == f"## {title}":
            return re.sub(r"^#(#+ )", r"\1", part, flags=re.MULTILINE)
    raise ValueError(f"README.md has no section '## {title}' (docs/hooks.py)")


def on_config(config: Any) -> Any:
    import click

    from connector.cli import main

    context = click.Context(main)
    for name in main.list_commands(context):
        main.get_command(context, name)
    return config


def on_files(files: Any, config: Any) -> Any:
    _anchors.clear()
    for file in files:
        if not file.src_uri.endswith(".md"):
            continue
        for title in MARKER.findall(Path(file.abs_src_path).read_text()):
            for heading in re.findall(r"^#+ (.+)$", section(title), flags=re.MULTILINE):
                _anchors.setdefault(slugify(heading, "-"), file.src_uri)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = MARKER.sub(lambda m: section(m.group(1)), markdown)
    markdown = markdown.replace("<!-- destinations -->", destinations_table())

    def link(m: re.Match[str]) -> str:
        target = m.group(1)
        if target.startswith("#"):
            if target[1:] not in _anchors:  # mkdocs checks only links to other pages
                raise ValueError(f"{page.file.src_uri}: no heading has the anchor {target}")
            home = _anchors[target[1:]]
            return f"]({'' if home == page.file.src_uri else home}{target})"
        return f"]({target.removeprefix('docs/')})"

    return re.sub(r"\]\(((?:#|docs/)[^)]*)\)", link, markdown)


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
