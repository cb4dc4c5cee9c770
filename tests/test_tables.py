"""The one table resolver: id, exact name, then a unique name in any case; else a clear error."""

from __future__ import annotations

import pytest

from connector import Workspace
from connector.api.models import TableSummary
from connector.errors import ConfigError, ExitCode, PermissionDenied, TableNotFound
from connector.tables import is_table_id, resolve_table, resolve_tables, table_not_found
from tests.fixtures.server import RunningServer


def listing(*tables: tuple[str, str]) -> list[TableSummary]:
    return [TableSummary(id=i, name=n, columns=1, rows=0, created_at="") for i, n in tables]


TABLES = listing(("tbl_1", "Orders"), ("tbl_2", "Customers"), ("tbl_3", "Order lines"))


# -- what finds a table -------------------------------------------------------------------


def test_an_id_finds_its_table() -> None:
    assert resolve_table(TABLES, "tbl_2") == "tbl_2"


def test_an_exact_name_finds_its_table() -> None:
    assert resolve_table(TABLES, "Customers") == "tbl_2"


def test_a_name_in_another_case_finds_its_table_when_only_one_matches() -> None:
    assert resolve_table(TABLES, "orders") == "tbl_1"
    assert resolve_table(TABLES, "ORDER LINES") == "tbl_3"


def test_an_id_wins_over_a_table_named_like_that_id() -> None:
    tables = listing(("tbl_1", "tbl_2"), ("tbl_2", "Other"))
    assert resolve_table(tables, "tbl_2") == "tbl_2"


def test_an_exact_name_wins_over_names_that_differ_only_in_case() -> None:
    tables = listing(("tbl_1", "orders"), ("tbl_2", "Orders"))
    assert resolve_table(tables, "Orders") == "tbl_2"
    assert resolve_table(tables, "orders") == "tbl_1"


def test_an_unlisted_id_is_passed_on_for_the_server_to_answer() -> None:
    """A scoped key does not list every table it may address: the server says 403 or 404."""
    assert resolve_table(TABLES, "tbl_9") == "tbl_9"
    assert resolve_table([], "tbl_abc-DEF_1") == "tbl_abc-DEF_1"


# -- what does not ------------------------------------------------------------------------


def test_an_unknown_name_suggests_the_close_matches() -> None:
    with pytest.raises(TableNotFound) as caught:
        resolve_table(TABLES, "Custmers")
    assert str(caught.value) == "no table named 'Custmers'; did you mean 'Customers'?"
    assert caught.value.wanted == "Custmers"
    assert caught.value.suggestions == ("Customers",)


def test_close_matches_ignore_case() -> None:
    with pytest.raises(TableNotFound, match=r"did you mean 'Orders'\?$"):
        resolve_table(listing(("tbl_1", "Orders"), ("tbl_2", "Customers")), "ORDRS")


def test_several_close_matches_are_all_offered() -> None:
    with pytest.raises(TableNotFound) as caught:
        resolve_table(TABLES, "Order")
    assert set(caught.value.suggestions) == {"Orders", "Order lines"}
    assert "did you mean 'Orders' or 'Order lines'?" in str(caught.value)


def test_an_unknown_name_with_nothing_close_lists_the_tables() -> None:
    with pytest.raises(TableNotFound) as caught:
        resolve_table(TABLES, "Invoices")
    assert str(caught.value) == (
        "no table named 'Invoices'; "
        "the tables this key can read are 'Orders', 'Customers', 'Order lines'"
    )
    assert caught.value.suggestions == ()


def test_a_long_listing_is_cut_short() -> None:
    tables = listing(*((f"tbl_{i}", f"T{i:02}") for i in range(25)))
    with pytest.raises(TableNotFound, match=r"'T09' and 15 more$"):
        resolve_table(tables, "Invoices")


def test_an_empty_workspace_says_so() -> None:
    with pytest.raises(TableNotFound, match=r"^no table named 'Orders'; this key can read no tables$"):
        resolve_table([], "Orders")


def test_something_that_is_not_quite_an_id_is_a_name() -> None:
    for value in ("tbl_", "tbl_ 1", "TBL_1", "row_1"):
        assert not is_table_id(value)
        with pytest.raises(TableNotFound):
            resolve_table(TABLES, value)


def test_two_tables_with_the_same_name_need_an_id() -> None:
    tables = listing(("tbl_1", "Orders"), ("tbl_2", "Orders"))
    with pytest.raises(TableNotFound) as caught:
        resolve_table(tables, "Orders")
    assert str(caught.value) == "several tables are named 'Orders' (tbl_1, tbl_2); use an id"
    assert resolve_table(tables, "tbl_2") == "tbl_2"


def test_two_names_that_differ_only_in_case_need_the_exact_name_or_an_id() -> None:
    tables = listing(("tbl_1", "orders"), ("tbl_2", "ORDERS"))
    with pytest.raises(TableNotFound, match=r"several tables are named 'Orders' \(tbl_1, tbl_2\)"):
        resolve_table(tables, "Orders")


def test_not_found_is_a_configuration_error_with_exit_code_2() -> None:
    assert issubclass(TableNotFound, ConfigError)
    assert TableNotFound("x").exit_code == ExitCode.USAGE == 2


def test_an_id_the_server_does_not_know_reads_as_such() -> None:
    """Callers turn a 404 for an unlisted id into this error."""
    assert str(table_not_found(TABLES, "tbl_9")).startswith("no table with id 'tbl_9'; ")


# -- several at once ------------------------------------------------------------------------


def test_several_tables_resolve_in_the_order_asked_each_once() -> None:
    assert resolve_tables(TABLES, ["Order lines", "orders", "tbl_3", "tbl_1", "Customers"]) == [
        "tbl_3",
        "tbl_1",
        "tbl_2",
    ]


def test_several_tables_fail_on_the_first_unknown_one() -> None:
    with pytest.raises(TableNotFound, match="'Nope'"):
        resolve_tables(TABLES, ["Orders", "Nope", "Neither"])


def test_no_tables_asked_is_no_tables() -> None:
    assert resolve_tables(TABLES, []) == []


# -- through Workspace, against the reference server -----------------------------------------


def test_a_workspace_reads_a_table_by_any_of_its_names(server: RunningServer) -> None:
    table_id = server.create_table({"name": "Orders", "columns": [{"name": "A", "type": "text"}]})
    with Workspace(server.base_url, server.api_key) as ws:
        assert {ws.schema(value).id for value in ("Orders", "orders", table_id)} == {table_id}


def test_a_table_the_scoped_key_does_not_list_is_refused_by_the_server(server: RunningServer) -> None:
    server.create_table({"name": "Orders", "columns": [{"name": "A", "type": "text"}]})
    payroll = server.create_table({"name": "Payroll", "columns": [{"name": "Pay", "type": "number"}]})
    with Workspace(server.base_url, server.create_key(tables=["Orders"])) as scoped:
        assert [t.name for t in scoped.tables()] == ["Orders"]
        with pytest.raises(PermissionDenied):
            scoped.schema(payroll)  # passed on unlisted: the server answers 403
        with pytest.raises(TableNotFound) as caught:
            scoped.schema("Payroll")  # a name it cannot list is just unknown
        assert str(caught.value) == "no table named 'Payroll'; the tables this key can read are 'Orders'"


def test_an_id_the_server_does_not_know_is_table_not_found(server: RunningServer) -> None:
    server.create_table({"name": "Orders", "columns": [{"name": "A", "type": "text"}]})
    with Workspace(server.base_url, server.api_key) as ws, pytest.raises(TableNotFound) as caught:
        ws.read("tbl_doesnotexist")
    assert str(caught.value).startswith("no table with id 'tbl_doesnotexist'; ")
    assert caught.value.exit_code == 2
