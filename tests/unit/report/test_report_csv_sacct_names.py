"""CSV: sacct's field names for what sacct names, harp's for its own figures, no total among the rows."""

import csv
import io

import pytest
from report_helpers import NOW, job

from harpd.records import Outcome
from harpd.report.aggregate import METRIC_NAMES, build_report
from harpd.report.columns import columns_for, from_records
from harpd.report.render_csv_json import render_csv
from harpd.report.window import Window

RECS = [
    job("1", user="alice", account="physics", partition="cpu"),
    job("2", user="bob", account="chem", partition="gpu", outcome=Outcome.OOM),
]


@pytest.mark.parametrize(
    "by, header", [("user", "User"), ("account", "Account"), ("partition", "Partition"), ("signature", "signature")]
)
def test_headers_are_sacct_field_names_and_there_is_no_total_row(by, header):
    cols = list(dict.fromkeys(columns_for(by) + ["source"]))
    r = build_report(from_records(RECS, cols), by=by, window=Window(None, None), now=NOW)
    rows = list(csv.reader(io.StringIO(render_csv(r))))
    assert rows[0] == [header, "source", *METRIC_NAMES]
    assert len(rows) == 1 + len(r.groups) and all(x[0] not in ("(total)", "TOTAL") for x in rows[1:])
    assert {x[1] for x in rows[1:]} == {"slurm"}
    jobs = rows[0].index("jobs")
    assert sum(int(x[jobs]) for x in rows[1:]) == 2  # a column sum counts every job once
