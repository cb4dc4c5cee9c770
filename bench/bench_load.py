"""PostgreSQL load: our SQL destination against `COPY` from a CSV file and `DataFrame.to_sql`.

All three load the same 200,000 rows (every column type, some nulls) into a throwaway
PostgreSQL server this benchmark starts itself. Goals, on the median of 5 alternating rounds
after a warm-up: at least 0.9x the rows/s of a bare COPY of the same rows from a CSV file,
and at least 5x the rows/s of pandas' `to_sql`.

Ours is `connector.destinations.sql` as a run drives it: ``apply(target,
TableChange("replace", batches))`` (COPY into a staging table, the ``_id`` primary key built
after, swapped in, all in the timed transaction). The COPY bound loads a table without a key;
beside it, for reference, the same COPY followed by adding the primary key (the end state
ours reaches).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import sqlalchemy as sa

from bench._procs import verdict
from connector.destinations import TableChange, Target, make_config, open_destination
from connector.schema import Column, Table, arrow_schema, frame_from_arrow
from tests.fixtures.postgres import start_postgres

ROWS = 200_000
#: Rows per batch, as extraction yields them.
BATCH_ROWS = 2_000
#: Rounds after a warm-up; the median of them is the figure (the best beside it).
REPEAT = 5
GOAL_VS_COPY = 0.9
GOAL_VS_TO_SQL = 5.0
OURS = "SQL destination (replace, COPY)"
BOUND = "COPY from a CSV file (bound)"
KEYED = "COPY, then the primary key"
BASELINE = "DataFrame.to_sql (baseline)"

TABLE = Table(
    id="tbl_bench",
    name="bench",
    columns=(
        Column("Name", "text"),
        Column("Status", "choice", options=("open", "on hold", "closed")),
        Column("Amount", "number"),
        Column("Paid", "checkbox"),
        Column("Due", "date"),
        Column("Notes", "text"),
    ),
)


def _rows() -> pa.Table:
    """Deterministic rows: every type, a tenth of the optional cells null."""
    rng = np.random.default_rng(1)
    n = ROWS
    null = rng.random(n) < 0.1
    schema = arrow_schema(TABLE)
    created = pa.array(np.datetime64("2024-01-01", "us") + np.arange(n) * 1000, pa.timestamp("us", tz="UTC"))
    status = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 3, n), pa.int32(), mask=null), pa.array(["open", "on hold", "closed"])
    )
    columns = [
        pa.array([f"row_{i:08d}" for i in range(n)]),
        created,
        created,
        pa.array([f"customer {i} \"quoted\", with comma" for i in range(n)]),
        status,
        pa.array(rng.normal(100, 50, n), pa.float64(), mask=null),
        pa.array(rng.random(n) < 0.5, pa.bool_(), mask=null),
        pa.array(rng.integers(18000, 20000, n).astype("int32"), pa.date32(), mask=null),
        pa.array(["note " * (i % 5) for i in range(n)], pa.string(), mask=null),
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _rounds(contenders: dict[str, Callable[[], object]]) -> dict[str, list[float]]:
    """Seconds of each contender: one warm-up each, then REPEAT rounds in alternating order
    (reversed every other round, so a busy moment on the shared machine hits all)."""
    for action in contenders.values():
        action()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(REPEAT):
        for name in names if round_ % 2 == 0 else reversed(names):
            started = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - started)
    return times


def main() -> None:
    data = _rows()
    server = start_postgres()
    engine = sa.create_engine(server.url())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            csv_path = Path(tmp) / "rows.csv"
            plain = data.cast(pa.schema([
                f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                for f in data.schema
            ]))
            pacsv.write_csv(plain, csv_path, pacsv.WriteOptions(include_header=False))

            def batches() -> Iterator[pa.RecordBatch]:
                return iter(data.to_batches(max_chunksize=BATCH_ROWS))

            config = make_config("url", server.url(), mode="replace", where="bench", base=Path(tmp))
            destination = open_destination(config)
            target = Target(TABLE, "bench")

            def ours() -> None:
                destination.apply(target, TableChange("replace", batches()))

            def copy_csv(keyed: bool = False) -> None:
                import psycopg

                name = "keyed" if keyed else "copied"
                with psycopg.connect(server.dsn()) as conn:
                    conn.execute(f"DROP TABLE IF EXISTS {name}")
                    conn.execute(f"CREATE TABLE {name} (LIKE bench)")  # no key: the bare bound
                    with conn.cursor() as cur, cur.copy(f"COPY {name} FROM STDIN (FORMAT csv)") as copy, \
                            csv_path.open("rb") as source:
                        while chunk := source.read(1 << 20):
                            copy.write(chunk)
                    if keyed:
                        conn.execute(f'ALTER TABLE {name} ADD PRIMARY KEY ("_id")')

            frame = frame_from_arrow(data, TABLE)
            frame["Due"] = frame["Due"].astype("object")  # to_sql cannot bind Arrow dates

            def to_sql() -> None:
                frame.to_sql("pandas", engine, if_exists="replace", index=False, chunksize=BATCH_ROWS)

            ours()  # `copied` is made LIKE it
            try:
                times = _rounds({OURS: ours, BOUND: copy_csv, KEYED: lambda: copy_csv(keyed=True),
                                 BASELINE: to_sql})
            finally:
                destination.close()
            for name in ("bench", "copied", "keyed", "pandas"):
                _check(engine, name)
    finally:
        engine.dispose()
        server.stop()
    for name, runs in times.items():
        listed = ", ".join(f"{t:.2f}" for t in runs)
        print(f"{name:<34} best {min(runs):5.2f} s ({ROWS / min(runs):>9,.0f} rows/s), median "
              f"{statistics.median(runs):5.2f} s  (runs: {listed} s)", flush=True)
    for label, other, goal in (("COPY", BOUND, GOAL_VS_COPY), ("COPY+key", KEYED, None),
                               ("to_sql", BASELINE, GOAL_VS_TO_SQL)):
        best = min(times[other]) / min(times[OURS])
        median = statistics.median(times[other]) / statistics.median(times[OURS])
        judged = f"(goal >= {goal}x on the median) -> {verdict(median, goal)}" if goal else "(reference)"
        print(f"ours / {label:<8} best {best:5.2f}x, median {median:5.2f}x  {judged}")


def _check(engine: sa.Engine, name: str) -> None:
    with engine.connect() as conn:
        count = conn.exec_driver_sql(f'SELECT count(*) FROM "{name}"').scalar_one()
    if count != ROWS:
        raise AssertionError(f"{name}: {count} rows loaded, expected {ROWS}")


if __name__ == "__main__":
    main()
