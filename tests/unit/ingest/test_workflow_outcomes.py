"""A workflow task's outcome is stored under the signature its next submission is decided by."""

from __future__ import annotations

from harpd.features.workflow import job_signature
from harpd.ingest.poller import Ingestor
from harpd.predict.live import _signature
from harpd.protocol import JobRequest
from harpd.records import JobRecord, Outcome
from tests.helpers.submissions import stored_submission


def test_the_poller_and_the_predictor_agree_on_a_rules_signature() -> None:
    wrap = "python -m snakemake --snakefile Snakefile --target-jobs 'work:sample=s1' --allowed-rules work --mode remote"
    job = {"job_name": "uuid-1", "script_name": None, "cwd": "/home/alice/wf", "commands": [wrap]}
    rec = JobRecord(job_id="41", source="slurm", user="alice", outcome=Outcome.COMPLETED, used_time_s=5.0)
    Ingestor._apply_submissions([rec], {"41": stored_submission(job=job, decision=None)}, {})
    asked = JobRequest(job_name="uuid-2", cwd="/home/alice/wf", commands=[wrap.replace("s1", "s2")])
    assert rec.signature == _signature(asked) == job_signature([wrap], "uuid-1", None, "/home/alice/wf")
    assert rec.signature.startswith("wf:")
