"""`connector push` and `connector apply` end to end against a real server."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from connector.cli import main
from connector.errors import ExitCode
from tests.fixtures.server import RunningServer, ServerFactory

SPEC = {
    "name": "Stock",
    "columns": [
        {"name": "Sku", "type": "text", "required": True},
        {"name": "Qty", "type": "number"},
        {"name": "Kind", "type": "choice", "options": ["a", "b"]},
    ],
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(tmp_path_factory.mktemp("push-cli"), {}).start()
    yield running
    running.stop()


def run(server: RunningServer, *args: str) -> Result:
    return CliRunner().invoke(
        main, [*args, "--base-url", server.base_url], env={"CONNECTOR_API_KEY": server.api_key}
    )


def stock(server: RunningServer, name: str, rows: int) -> str:
    table_id = server.create_table({**SPEC, "name": name})
    server.insert_rows(table_id, [{"Sku": f"s{i}", "Qty": i, "Kind": "a"} for i in range(rows)])
    return table_id


def rows(server: RunningServer, table_id: str) -> dict[str, float]:
    with server.client() as http:
        found = http.get(f"/tables/{table_id}/rows", params={"limit": 1000}).json()["rows"]
    return {r["fields"]["Sku"]: r["fields"]["Qty"] for r in found}


def test_dry_run_shows_counts_samples_coercions_and_requests(server: RunningServer, tmp_path: Path) -> None:
    table_id = stock(server, "dry", 5)
    path = tmp_path / "stock.csv"
    path.write_text("Sku;Qty;Kind\ns0;0;a\ns1;10;a\ns2;2;b\nnew;1,500;a\n", encoding="utf-8")
    result = run(server, "push", str(path), "--table", "dry", "--key", "Sku", "--mode", "mirror",
                 "--dry-run", "--max-delete-ratio", "0.5")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "create 1, update 2, delete 2, unchanged 1, skipped 0" in out
    assert "requests: 1 bulk create + 2 update + 1 bulk delete = 4" in out
    assert "number from text: 3" in out and "number with thousands separators: 1" in out
    assert "row 5: Sku='new', Qty=1500, Kind='a'" in out
    assert "row 3 (" in out and "Qty: 1 → 10" in out
    assert "Kind: 'a' → 'b'" in out
    assert ": Sku='s3'" in out and ": Sku='s4'" in out
    assert rows(server, table_id) == {f"s{i}": i for i in range(5)}  # nothing written


def test_push_prints_a_summary_and_the_guard_stops_a_mass_delete(server: RunningServer, tmp_path: Path) -> None:
    table_id = stock(server, "guard", 10)
    path = tmp_path / "few.csv"
    path.write_text("Sku,Qty\ns0,100\n", encoding="utf-8")
    refused = run(server, "push", str(path), "--table", "guard", "--key", "Sku", "--mode", "mirror")
    assert refused.exit_code == 2
    assert "mirror would delete 9 of 10 rows" in refused.output and "--allow-delete 9" in refused.output
    assert rows(server, table_id) == {f"s{i}": i for i in range(10)}
    done = run(server, "push", str(path), "--table", "guard", "--key", "Sku", "--mode", "mirror",
               "--allow-delete", "9")
    assert done.exit_code == 0, done.output
    assert "created 0, updated 1, deleted 9, rejected 0, requests 2" in done.output
    assert rows(server, table_id) == {"s0": 100}


def test_a_saved_plan_applies_once_and_refuses_when_rows_changed(server: RunningServer, tmp_path: Path) -> None:
    table_id = stock(server, "saved", 3)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty\ns0,7\ns9,9\n", encoding="utf-8")
    plan = tmp_path / "plan.json"
    saved = run(server, "push", str(source), "--table", "saved", "--key", "Sku", "--plan-out", str(plan))
    assert saved.exit_code == 0 and "connector apply" in saved.output
    assert rows(server, table_id) == {"s0": 0, "s1": 1, "s2": 2}

    applied = run(server, "apply", str(plan))
    assert applied.exit_code == 0, applied.output
    assert "created 1, updated 1, deleted 0" in applied.output
    assert rows(server, table_id) == {"s0": 7, "s1": 1, "s2": 2, "s9": 9}

    again = run(server, "apply", str(plan))  # its rows have changed since (by itself)
    assert again.exit_code == 1
    assert "changed since the plan was made" in again.output and "nothing was written" in again.output
    assert rows(server, table_id) == {"s0": 7, "s1": 1, "s2": 2, "s9": 9}


def test_a_plan_is_refused_when_someone_else_edits_its_rows(server: RunningServer, tmp_path: Path) -> None:
    table_id = stock(server, "raced", 2)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty\ns0,5\n", encoding="utf-8")
    plan = tmp_path / "plan.json"
    assert run(server, "push", str(source), "--table", "raced", "--key", "Sku",
               "--plan-out", str(plan)).exit_code == 0
    with server.client() as http:
        row = http.get(f"/tables/{table_id}/rows", params={"filter": '{"Sku": {"eq": "s0"}}'}).json()
        http.patch(f"/tables/{table_id}/rows/{row['rows'][0]['id']}", json={"fields": {"Qty": 50}})
    refused = run(server, "apply", str(plan))
    assert refused.exit_code == 1 and "1 row(s)" in refused.output
    assert rows(server, table_id) == {"s0": 50, "s1": 1}


def test_unknown_table_and_key_are_usage_errors(server: RunningServer, tmp_path: Path) -> None:
    stock(server, "usage", 0)
    path = tmp_path / "s.csv"
    path.write_text("Sku\na\n", encoding="utf-8")
    no_table = run(server, "push", str(path), "--table", "nope", "--key", "Sku")
    assert no_table.exit_code == 2 and "'nope'" in no_table.output
    no_key = run(server, "push", str(path), "--table", "usage", "--key", "Size")
    assert no_key.exit_code == 2 and "no column 'Size'" in no_key.output


def test_dry_run_with_plan_out_still_saves_the_plan(server: RunningServer, tmp_path: Path) -> None:
    table_id = stock(server, "both", 1)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty\ns0,3\n", encoding="utf-8")
    plan = tmp_path / "plan.json"
    result = run(server, "push", str(source), "--table", "both", "--key", "Sku", "--dry-run",
                 "--plan-out", str(plan))
    assert result.exit_code == 0 and "update 1" in result.output and plan.exists()
    assert rows(server, table_id) == {"s0": 0}


def test_a_read_only_key_fails_cleanly_without_writing(server: RunningServer, tmp_path: Path) -> None:
    table_id = stock(server, "readonly", 1)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty\ns0,3\nnew,1\n", encoding="utf-8")
    key = server.create_key(read_only=True)
    result = CliRunner().invoke(
        main, ["push", str(source), "--table", "readonly", "--key", "Sku", "--base-url", server.base_url],
        env={"CONNECTOR_API_KEY": key},
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "may not change" in result.output and key not in result.output
    assert rows(server, table_id) == {"s0": 0}


def test_a_plan_that_cannot_be_saved_is_a_clean_error(server: RunningServer, tmp_path: Path) -> None:
    stock(server, "unsaved", 1)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty\ns0,3\n", encoding="utf-8")
    (tmp_path / "a-file").write_text("")
    plan = tmp_path / "a-file" / "plan.json"  # its directory is a file

    result = run(server, "push", str(source), "--table", "unsaved", "--key", "Sku",
                 "--plan-out", str(plan))

    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"cannot write {plan}" in result.output


@pytest.mark.slow
def test_the_cli_starts_without_pandas() -> None:
    started = subprocess.run(
        [sys.executable, "-c", "import sys, connector.cli; print('pandas' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )
    assert started.stdout.strip() == "False"


def test_push_exits_3_when_the_server_rejects_rows(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """Another client deletes rows while the push reads the table: their updates come back
    404, are written to the rejects file, and the push is partial (exit 3), not failed."""
    busy = server_factory(delete_on_read=2, max_page_size=50, seed=7)
    table_id = stock(busy, "busy", 200)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty\n" + "".join(f"s{i},{i + 1000}\n" for i in range(200)), encoding="utf-8")

    result = run(busy, "push", str(source), "--table", "busy", "--key", "Sku", "--mode", "update")

    assert result.exit_code == ExitCode.PARTIAL == 3, result.output
    rejected = int(result.output.split("rejected ")[1].split(",")[0])
    assert rejected > 0 and f"{rejected} row(s) rejected" in result.output
    assert "the row was deleted meanwhile" in (tmp_path / "stock.rejects.csv").read_text()
    assert all(qty >= 1000 for qty in rows(busy, table_id).values())  # every row left was updated


def test_apply_exits_3_when_the_server_rejects_rows(server: RunningServer, tmp_path: Path) -> None:
    """A saved plan carries a value the server refuses (edited by hand here): the good rows
    are written, the bad one goes to the rejects file, and the exit code says partial."""
    table_id = stock(server, "edited", 1)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty,Kind\nn1,1,a\nn2,2,b\n", encoding="utf-8")
    plan = tmp_path / "plan.json"
    saved = run(server, "push", str(source), "--table", "edited", "--key", "Sku", "--plan-out", str(plan))
    assert saved.exit_code == 0, saved.output
    data = json.loads(plan.read_text())
    data["creates"][1]["fields"]["Kind"] = "zzz"
    plan.write_text(json.dumps(data))

    result = run(server, "apply", str(plan))

    assert result.exit_code == ExitCode.PARTIAL == 3, result.output
    assert "created 1" in result.output and "1 row(s) rejected" in result.output
    assert "zzz" in (tmp_path / "plan.rejects.csv").read_text()
    assert rows(server, table_id) == {"s0": 0, "n1": 1}


#: The summary `connector sync --log-format json` prints, written out: a field dropped from
#: the result model fails here.
SUMMARY_KEYS = {
    "job", "status", "exit_code", "dry_run", "started_at", "finished_at", "state_file",
    "destinations", "tables", "pushes", "error", "seconds", "verified", "concurrency",
    "max_concurrency", "totals",
}
TOTALS_KEYS = {
    "tables", "ok", "unchanged", "planned", "skipped", "frozen", "failed", "rows_read",
    "rows_written", "rows_deleted", "window_rows", "late_rows", "ahead_rows", "pushes",
    "push_created",
    "push_updated", "push_deleted", "push_unchanged", "push_rejected",
}
PUSH_KEYS = {
    "file", "table", "status", "created", "updated", "deleted", "unchanged", "error", "plan",
    "rejected", "source", "table_id", "key", "mode", "requests", "rejects_file", "plan_file",
    "problems",
}


def summary_of(result: Result) -> dict[str, Any]:
    """The --json summary: the whole of stdout, one JSON document."""
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_json_summaries_have_syncs_fields_for_done_planned_partial_and_failed(
    server: RunningServer, tmp_path: Path
) -> None:
    stock(server, "summaries", 2)
    source = tmp_path / "stock.csv"
    source.write_text("Sku,Qty,Kind\ns0,5,a\nn1,1,a\nn2,2,zzz\n", encoding="utf-8")
    plan = tmp_path / "plan.json"

    failed = run(server, "push", str(source), "--table", "summaries", "--key", "Sku", "--json")
    source.write_text("Sku,Qty,Kind\ns0,5,a\nn1,1,a\nn2,2,b\n", encoding="utf-8")
    planned = run(server, "push", str(source), "--table", "summaries", "--key", "Sku", "--json",
                  "--dry-run")
    saved = run(server, "push", str(source), "--table", "summaries", "--key", "Sku", "--json",
                "--plan-out", str(plan))
    data = json.loads(plan.read_text())
    data["creates"][1]["fields"]["Kind"] = "zzz"  # refused by the server
    plan.write_text(json.dumps(data))
    partial = run(server, "apply", str(plan), "--json")
    done = run(server, "push", str(source), "--table", "summaries", "--key", "Sku", "--json")

    for result, code in [(planned, 0), (failed, 1), (saved, 0), (partial, 3), (done, 0)]:
        assert result.exit_code == code, result.output
        out = summary_of(result)
        assert set(out) == SUMMARY_KEYS and out["exit_code"] == code
        assert set(out["totals"]) == TOTALS_KEYS
        (entry,) = out["pushes"]
        assert set(entry) == PUSH_KEYS
        assert out["finished_at"] >= out["started_at"] and out["seconds"] >= 0
    assert summary_of(planned)["status"] == "ok"
    assert summary_of(planned)["pushes"][0] | {"plan": None} == summary_of(planned)["pushes"][0] | {
        "status": "planned", "created": 2, "updated": 1, "deleted": 0, "unchanged": 0,
        "error": None, "plan": None, "rejected": 0, "table": "summaries", "key": "Sku",
        "mode": "upsert", "requests": 0, "rejects_file": None, "plan_file": None, "problems": [],
    }
    assert "create 2, update 1" in summary_of(planned)["pushes"][0]["plan"]
    bad = summary_of(failed)
    assert bad["status"] == "failed" and bad["error"].startswith(f"{source}: row 4, column 'Kind'")
    assert bad["pushes"][0]["table"] == "summaries" and bad["pushes"][0]["created"] == 0
    assert summary_of(saved)["pushes"][0]["plan_file"] == str(plan)
    half = summary_of(partial)
    assert (half["status"], half["error"]) == ("partial", None)
    assert half["pushes"][0] | {"rejects_file": None} == half["pushes"][0] | {
        "status": "failed", "created": 1, "error": "the server rejected 1 rows", "rejected": 1,
        "rejects_file": None,
    }
    assert half["pushes"][0]["rejects_file"] == str(tmp_path / "plan.rejects.csv")
    assert summary_of(done)["pushes"][0]["created"] == 1  # n2 was the one rejected
    assert summary_of(done)["totals"]["push_created"] == 1


def test_json_summary_when_nothing_could_start(tmp_path: Path) -> None:
    source = tmp_path / "stock.csv"
    source.write_text("Sku\na\n", encoding="utf-8")
    no_key = CliRunner().invoke(
        main, ["push", str(source), "--table", "t", "--key", "Sku", "--json",
               "--base-url", "http://127.0.0.1:9/v1"],
        env={"CONNECTOR_API_KEY": ""},
    )
    assert no_key.exit_code == 2
    out = summary_of(no_key)
    assert (out["status"], out["exit_code"]) == ("failed", 2)
    assert "CONNECTOR_API_KEY" in out["error"] and out["pushes"][0]["table"] == "t"


def test_a_date_format_reads_day_first_dates(server: RunningServer, tmp_path: Path) -> None:
    table_id = server.create_table({"name": "dated", "columns": [
        {"name": "Sku", "type": "text"}, {"name": "On", "type": "date"}]})
    source = tmp_path / "dated.csv"
    source.write_text("Sku,On\na,05/03/2024\nb,5 March 2024\nc,2024/03/06\n", encoding="utf-8")
    refused = run(server, "push", str(source), "--table", "dated", "--key", "Sku")
    assert refused.exit_code == 1 and "row 2, column 'On', value '05/03/2024'" in refused.output
    done = run(server, "push", str(source), "--table", "dated", "--key", "Sku",
               "--date-format", "%d/%m/%Y")
    assert done.exit_code == 0, done.output
    with server.client() as http:
        found = http.get(f"/tables/{table_id}/rows").json()["rows"]
    assert sorted((r["fields"]["Sku"], r["fields"]["On"]) for r in found) == [
        ("a", "2024-03-05"), ("b", "2024-03-05"), ("c", "2024-03-06")
    ]
