"""The one type table, and the Arrow schema and frame it gives a table."""

from __future__ import annotations

import json
import warnings

import pandas as pd
import pyarrow as pa
import pytest

from connector.errors import ColumnNotFound, ConfigError, ConnectorWarning, UnknownColumnTypeWarning
from connector.push.coerce import coerce_column
from connector.schema import (
    CHECKBOX_FALSE,
    CHECKBOX_TRUE,
    TYPES,
    Column,
    Table,
    arrow_schema,
    column_type,
    frame_from_arrow,
)

TABLE = Table.from_api({
    "id": "tbl_1",
    "name": "People",
    "columns": [
        {"id": "col_Name", "name": "Name", "type": "text", "required": True},
        {"id": "col_Status", "name": "Status", "type": "choice", "options": ["a", "b"]},
        {"id": "col_id", "name": "id", "type": "number"},
        {"id": "col__id", "name": "_id", "type": "text"},
    ],
})


def test_each_api_type_has_one_arrow_pandas_and_sql_type() -> None:
    assert set(TYPES) == {"text", "choice", "number", "checkbox", "date"}
    assert TYPES["number"].arrow == pa.float64()
    assert TYPES["checkbox"].pandas == pd.BooleanDtype()
    assert TYPES["date"].arrow == pa.date32()


def test_an_unknown_type_is_text_and_warned_about_once_per_schema() -> None:
    spec = {"id": "t", "name": "T", "columns": [{"name": "A", "type": "geo"}, {"name": "B", "type": "geo"},
                                              {"name": "C", "type": "rating"}]}
    with pytest.warns(UnknownColumnTypeWarning) as recorded:
        table = Table.from_api(spec)
    # ours only: a recorder also takes what the garbage collector reports of other tests
    caught = [w for w in recorded if issubclass(w.category, ConnectorWarning)]
    assert len(caught) == 1
    assert "'geo'" in str(caught[0].message) and "'rating'" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert table.column("A").arrow_type == pa.string()  # using it is silent
        assert column_type("geo") is TYPES["text"]


def test_system_columns_make_way_for_user_columns() -> None:
    assert TABLE.system_names() == {"id": "__id", "created_at": "_created_at", "updated_at": "_updated_at",
                                    "deleted_at": "_deleted_at", "deleted": "_deleted"}
    schema = arrow_schema(TABLE)
    assert schema.names == ["__id", "_created_at", "_updated_at", "Name", "Status", "id", "_id"]
    assert schema.field("_created_at").type == pa.timestamp("us", tz="UTC")


def test_the_arrow_schema_says_where_it_came_from() -> None:
    schema = arrow_schema(TABLE, ["Status"])
    assert schema.metadata[b"connector.table_id"] == b"tbl_1"
    assert schema.metadata[b"connector.table_name"] == b"People"
    status = schema.field("Status")
    assert status.type == pa.dictionary(pa.int32(), pa.string())
    assert json.loads(status.metadata[b"connector.options"]) == ["a", "b"]
    assert status.metadata[b"connector.type"] == b"choice"


def test_a_frame_keeps_every_choice_option_and_the_selected_columns() -> None:
    schema = arrow_schema(TABLE, ["Status"])
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["row_1"]), pa.array([None], schema.field(1).type), pa.array([None], schema.field(2).type),
         pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(["a", "b"]))],
        schema=schema,
    )
    frame = frame_from_arrow([batch], TABLE)
    assert list(frame.columns) == ["__id", "_created_at", "_updated_at", "Status"]
    assert list(frame["Status"].cat.categories) == ["a", "b"]
    assert frame["__id"].dtype == pd.StringDtype()


def test_a_column_from_the_api_keeps_required_and_options() -> None:
    column = Column.from_api({"name": "S", "type": "choice", "options": ["x"], "required": True})
    assert (column.id, column.required, column.options) == ("col_S", True, ("x",))
    assert column.pandas_dtype == pd.CategoricalDtype(["x"])


def test_a_missing_column_suggests_the_close_ones() -> None:
    with pytest.raises(ColumnNotFound) as caught:
        TABLE.column("Stat")
    assert str(caught.value) == "table 'People' has no column 'Stat'; did you mean 'Status'?"
    assert isinstance(caught.value, ConfigError) and not isinstance(caught.value, KeyError)
    with pytest.raises(ColumnNotFound, match=r"did you mean 'Name'\?$"):
        TABLE.column("NAME")  # names are exact: a case-insensitive match is only a hint
    with pytest.raises(ColumnNotFound, match=r"; columns: 'Name', 'Status', 'id', '_id'$"):
        TABLE.column("Postcode")


def test_an_arrow_schema_of_a_missing_column_is_a_configuration_error() -> None:
    with pytest.raises(ColumnNotFound, match="'Colour'"):
        arrow_schema(TABLE, ["Name", "Colour"])


def test_checkbox_words_are_one_vocabulary_without_overlap() -> None:
    assert {"true", "t", "yes", "1", "x"} <= CHECKBOX_TRUE
    assert {"false", "f", "no", "0"} <= CHECKBOX_FALSE
    assert not CHECKBOX_TRUE & CHECKBOX_FALSE
    assert all(word == word.strip().lower() for word in CHECKBOX_TRUE | CHECKBOX_FALSE)


def test_push_reads_every_checkbox_word() -> None:
    words = sorted(CHECKBOX_TRUE) + sorted(CHECKBOX_FALSE)
    cells = pd.Series([w.upper() for w in words], dtype=object)
    coerced = coerce_column(cells, Column(name="C", type="checkbox"))
    assert coerced.errors == {}
    assert coerced.values.tolist() == [True] * len(CHECKBOX_TRUE) + [False] * len(CHECKBOX_FALSE)


def test_extraction_reads_every_checkbox_word_that_push_reads() -> None:
    """A server that sends checkboxes as text: extraction and push take the same words."""
    import httpx

    from connector import Client, Workspace

    words = sorted(CHECKBOX_TRUE) + sorted(CHECKBOX_FALSE)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/tables"):
            summary = {"id": "tbl_1", "name": "T", "columns": 1, "rows": len(words), "created_at": ""}
            return httpx.Response(200, json={"tables": [summary]})
        if not request.url.path.endswith("/rows"):
            return httpx.Response(200, json={"id": "tbl_1", "name": "T",
                                             "columns": [{"name": "C", "type": "checkbox"}]})
        offset = int(request.url.params["offset"])
        stamp = "2024-01-01T00:00:00Z"
        page = [{"id": f"row_{i:03}", "fields": {"C": w.upper()}, "created_at": stamp,
                 "updated_at": stamp} for i, w in enumerate(words)][offset:]
        return httpx.Response(200, json={"rows": page, "total": len(words), "limit": 1000,
                                         "offset": offset})

    with Client("http://api.test/v1", "k", transport=httpx.MockTransport(handler)) as client, \
            warnings.catch_warnings():
        warnings.simplefilter("error")
        frame = Workspace(client=client).read("T")
    assert frame["C"].tolist() == [True] * len(CHECKBOX_TRUE) + [False] * len(CHECKBOX_FALSE)
