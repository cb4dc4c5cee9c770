"""notebooks/analysis.ipynb runs top to bottom against a fresh demo server, so it never rots."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.fixtures.server import RunningServer, ServerFactory

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "analysis.ipynb"


def test_the_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)

    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code
    assert all(not c.outputs and c.execution_count is None for c in code)


def test_the_analysis_notebook_runs_against_the_demo_workspace(
    server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server: RunningServer = server_factory(demo=True)
    monkeypatch.setenv("CONNECTOR_BASE_URL", server.base_url)
    monkeypatch.setenv("CONNECTOR_API_KEY", server.api_key)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    escalated_before = _escalated(server)

    NotebookClient(
        notebook,
        timeout=120,
        kernel_name=_this_python_kernel(tmp_path, monkeypatch),
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()

    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the plot was drawn"
    text = "".join(o.get("text", "") for o in outputs)
    assert "update " in text and "mode update" in text  # the plan was printed before the push
    assert _escalated(server) > escalated_before  # the change was pushed back


def _this_python_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec that runs this interpreter (the venv's python), found first on JUPYTER_PATH,
    so a `python3` kernelspec elsewhere on the machine cannot pick another Python."""
    name = "connector-tests"
    spec = tmp_path / "jupyter" / "kernels" / name
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    kernel = {"argv": argv, "display_name": "connector tests", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(kernel))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return name


def _escalated(server: RunningServer) -> int:
    """Escalated tickets, counted straight from the server."""
    with server.client() as http:
        (tickets,) = [
            t["id"] for t in http.get("/tables").json()["tables"] if t["name"] == "Tickets"
        ]
        params = {"filter": '{"Escalated": {"eq": true}}', "limit": 1000}
        return len(http.get(f"/tables/{tickets}/rows", params=params).json()["rows"])
