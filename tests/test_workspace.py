"""The notebook API and the `tables` / `schema` commands, against the reference server."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pandas as pd
import pytest
from click.testing import CliRunner

from connector import Client, Workspace
from connector.cli import main
from connector.errors import (
    ColumnNotFound,
    ConfigError,
    PermissionDenied,
    SkippedTableWarning,
    TableNotFound,
)
from tests.fixtures.server import RunningServer

ORDERS: dict[str, Any] = {
    "name": "Orders",
    "columns": [
        {"name": "Customer", "type": "text", "required": True},
        {"name": "Status", "type": "choice", "options": ["Open", "Shipped"]},
        {"name": "Total", "type": "number"},
    ],
}


@pytest.fixture
def orders(server: RunningServer) -> str:
    table_id = server.create_table(ORDERS)
    server.insert_rows(table_id, [{"Customer": f"c{i}", "Status": ["Open", "Shipped"][i % 2], "Total": i}
                                  for i in range(10)])
    return table_id


@pytest.fixture
def ws(server: RunningServer) -> Workspace:
    return Workspace(server.base_url, server.api_key)


def test_tables_lists_names_and_counts(ws: Workspace, orders: str) -> None:
    [summary] = ws.tables()
    assert (summary.id, summary.name, summary.rows) == (orders, "Orders", 10)


@pytest.mark.parametrize("name", ["Orders", "orders", "ORDERS"])
def test_a_table_is_found_by_name_or_id(ws: Workspace, orders: str, name: str) -> None:
    assert ws.schema(name).id == orders
    assert ws.schema(orders).name == "Orders"


def test_read_gives_a_typed_frame_filtered_and_projected(ws: Workspace, orders: str) -> None:
    frame = ws.read("Orders", filter={"Status": {"eq": "Shipped"}}, columns=["Total"])
    assert list(frame.columns) == ["_id", "_created_at", "_updated_at", "Total"]
    assert frame["Total"].tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert frame["Total"].dtype == pd.Float64Dtype()


def test_one_column_may_be_named_alone(ws: Workspace, orders: str) -> None:
    assert list(ws.read("Orders", columns="Total").columns) == ["_id", "_created_at", "_updated_at", "Total"]


def test_an_unknown_column_suggests_the_close_one(ws: Workspace, orders: str) -> None:
    with pytest.raises(ColumnNotFound, match=r"did you mean 'Total'\?"):
        ws.read("Orders", columns=["Totl"])


def test_an_unknown_table_names_the_tables_there_are(ws: Workspace, orders: str) -> None:
    with pytest.raises(TableNotFound, match="'Orders'"):
        ws.read("Invoices")


def test_a_misspelt_table_suggests_the_close_match(ws: Workspace, orders: str) -> None:
    with pytest.raises(TableNotFound, match=r"did you mean 'Orders'\?"):
        ws.schema("Ordres")


def test_two_tables_with_one_name_need_an_id(server: RunningServer, ws: Workspace) -> None:
    server.create_table(ORDERS)
    server.create_table({**ORDERS, "name": "orders"})
    with pytest.raises(ConfigError, match="use an id"):
        ws.schema("ORDERS")


def test_a_scoped_key_reads_its_table_and_is_refused_another(server: RunningServer, orders: str) -> None:
    other = server.create_table({"name": "Payroll", "columns": [{"name": "Pay", "type": "number"}]})
    with Workspace(server.base_url, server.create_key(tables=["Orders"])) as scoped:
        assert list(scoped.read_all()) == ["Orders"]
        with pytest.raises(PermissionDenied):
            scoped.read(other)


def test_reading_all_tables_skips_a_forbidden_one_with_a_warning(server: RunningServer, orders: str) -> None:
    """A server may list a table the key cannot read (ours does not): it is skipped, not fatal."""
    secret = server.create_table({"name": "Payroll", "columns": [{"name": "Pay", "type": "number"}]})
    upstream = httpx.HTTPTransport()

    def forbid_payroll(request: httpx.Request) -> httpx.Response:
        if secret in request.url.path:
            return httpx.Response(403, json={"error": {"code": "FORBIDDEN", "message": "no access"}})
        answer = upstream.handle_request(request)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.read())

    client = Client(server.base_url, server.api_key, transport=httpx.MockTransport(forbid_payroll))
    with Workspace(client=client) as workspace, pytest.warns(SkippedTableWarning, match="Payroll"):
        frames = workspace.read_all()
    client.close()
    assert list(frames) == ["Orders"]
    assert len(frames["Orders"]) == 10


def test_push_makes_the_table_match_a_frame(ws: Workspace, orders: str) -> None:
    source = pd.DataFrame({"Customer": ["c1", "new"], "Status": ["Open", "Open"], "Total": [100.0, 5.0]})
    result = ws.push(source, table="Orders", key="Customer")
    assert (result.created, result.updated) == (1, 1)
    after = ws.read("Orders").set_index("Customer")
    assert after.loc["c1", "Total"] == 100.0
    assert after.loc["new", "Status"] == "Open"
    assert len(after) == 11


def test_repr_shows_the_url_not_the_key(server: RunningServer) -> None:
    with Workspace(server.base_url, server.api_key) as workspace:
        assert server.api_key not in repr(workspace)
        assert server.base_url in repr(workspace)


# --- CLI -------------------------------------------------------------------------------------


def run(server: RunningServer, *args: str, key: str | None = None) -> Any:
    env = {"CONNECTOR_API_KEY": key or server.api_key, "CONNECTOR_BASE_URL": None}
    return CliRunner().invoke(main, [*args, "--base-url", server.base_url], env=env)


def test_cli_tables_prints_a_table_or_json(server: RunningServer, orders: str) -> None:
    text = run(server, "tables")
    assert text.exit_code == 0, text.output
    assert "Orders" in text.output and orders in text.output
    as_json = run(server, "tables", "--json")
    assert json.loads(as_json.output) == [
        {"id": orders, "name": "Orders", "columns": 3, "rows": 10, "created_at": json.loads(
            as_json.output)[0]["created_at"]}
    ]


def test_cli_schema_shows_columns_and_options(server: RunningServer, orders: str) -> None:
    text = run(server, "schema", "orders")
    assert text.exit_code == 0, text.output
    assert "Status" in text.output and "Open, Shipped" in text.output
    described = json.loads(run(server, "schema", orders, "--json").output)
    assert described["columns"][1] == {"name": "Status", "type": "choice", "required": False,
                                       "options": ["Open", "Shipped"]}


def test_cli_a_refused_key_is_one_line_exit_2_without_the_key(server: RunningServer) -> None:
    result = run(server, "tables", key="wrong-key-123")
    assert result.exit_code == 2  # a key the server refuses is a configuration error
    assert "CONNECTOR_API_KEY" in result.output
    assert "Traceback" not in result.output
    assert "wrong-key-123" not in result.output


def test_cli_without_a_key_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["tables", "--base-url", "http://127.0.0.1:9/v1"],
                                env={"CONNECTOR_API_KEY": None})
    assert result.exit_code == 2
    assert "CONNECTOR_API_KEY" in result.output
