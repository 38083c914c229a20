"""The Slurm calls recovery adds to CliBackend, over stand-in commands.

Each stand-in prints what Slurm 22.05 printed on the local cluster (the
output shapes are copied from real runs), so the parsing is tested without a
cluster; tests/slurm/test_recovery.py runs the same calls for real.
"""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path

import pytest

from harpd.config import SlurmSettings
from harpd.slurm.base import NotRecordedYet, SlurmError
from harpd.slurm.cli_backend import CliBackend

SCONTROL = r"""#!/bin/sh
case "$1 $2" in
  "write batch_script")
    if [ "$3" = 12 ]; then printf '#!/bin/bash\n#SBATCH --job-name=x\necho "$@"\n'; exit 0; fi
    # 22.05 for a job slurmctld no longer holds: exit 0, nothing on stdout
    if [ "$3" = 15 ]; then echo "job script retrieval failed: Invalid job id specified" >&2; exit 0; fi
    echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  "show config") printf 'Configuration data as of 2026-11-22T03:39:59\nAccountingStoreFlags    = job_comment,job_env,job_script\nMinJobAge               = 600 sec\nSlurmUser               = slurm(64030)\nSlurmdUser              = root(0)\n' ;;
esac
"""
SACCT = r"""#!/bin/sh
case "$*" in
  *--batch-script*)
    case "$*" in
      *" 15"*) printf 'Batch Script for 15\n--------------------------------------------------------------------------------\n#!/bin/bash\necho fifteen\n\n' ;;
      *" 13"*) printf 'Batch Script for 13\n--------------------------------------------------------------------------------\n#!/bin/bash\nsleep 1\n\n' ;;
      *) printf 'Batch Script for 14\n--------------------------------------------------------------------------------\nNONE\n\n' ;;
    esac ;;
  *--env-vars*)
    case "$*" in
      *" 13"*) printf 'Environment used for 13 (must be batch to display)\n--------------------------------------------------------------------------------\nDUR=100\nPATH=/opt/conda/envs/x/bin:/usr/bin\nBASH_FUNC_module%%%%=() {  eval $(modulecmd bash "$@")\n}\nEMPTY=\nEQ=a=b\n' ;;
      *" 14"*) printf 'Environment used for 14 (must be batch to display)\n--------------------------------------------------------------------------------\nNONE\n' ;;
    esac ;;
  *--json*) cat "$(dirname "$0")/sacct.json" ;;
esac
"""
SQUEUE = r"""#!/bin/sh
cat "$(dirname "$0")/squeue.json"
"""
SACCTMGR = r"""#!/bin/sh
printf 'Operator|\n'
"""


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _squeue_json() -> str:
    """slurmctld's jobs (22.05's squeue --json, recorded), with the comments of this test's story."""
    doc = json.loads((FIXTURES / "squeue" / "22.05-jobs.json").read_text())
    template = doc["jobs"][2]
    jobs = []
    for jid, uid, user, comment in [
        (5, 1000, "alice", "harp retry 2 of 3"),
        (6, 1000, "alice", ""),
        (40, 1000, "alice", "harp retry 2 of 3"),
        (50, 1001, "bob", "harp retry 2 of 3"),  # another user's job: not alice's resubmission
        (51, 1000, "alice", "x\nharp retry 2 of 3"),  # the marker after a line break is not its comment
    ]:
        j = copy.deepcopy(template)
        j.update(job_id=jid, user_id=uid, user_name=user, comment=comment)
        jobs.append(j)
    return json.dumps({**doc, "jobs": jobs})


def _sacct_json() -> str:
    """Accounting's runs (22.05's sacct --json, recorded), with this test's comments."""
    doc = json.loads((FIXTURES / "sacct" / "22.05-jobs.json").read_text())
    template = doc["jobs"][0]
    jobs = []
    for jid, comment in [
        (40, "harp retry 2 of 3"),
        (41, "harp retry 2 of 33"),
        (42, None),
        (43, "harp retry 2 of 3; user note"),
    ]:
        j = copy.deepcopy(template)
        j.update(job_id=jid, user="alice")
        j["comment"] = {"administrator": None, "job": comment, "system": None}
        jobs.append(j)
    return json.dumps({**doc, "jobs": jobs})


@pytest.fixture
def backend(tmp_path):
    (tmp_path / "squeue.json").write_text(_squeue_json())
    (tmp_path / "sacct.json").write_text(_sacct_json())
    for name, text in {"scontrol": SCONTROL, "sacct": SACCT, "squeue": SQUEUE, "sacctmgr": SACCTMGR}.items():
        p = tmp_path / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return CliBackend(SlurmSettings(bin_dir=tmp_path, command_timeout_s=10))


def test_batch_script_from_slurmctld_then_accounting(backend):
    assert backend.batch_script("12") == b'#!/bin/bash\n#SBATCH --job-name=x\necho "$@"\n'
    assert backend.batch_script("13") == b"#!/bin/bash\nsleep 1\n"  # job purged: sacct's copy
    with pytest.raises(SlurmError, match="no batch script for job 14"):
        backend.batch_script("14")
    with pytest.raises(SlurmError, match="invalid job id"):
        backend.batch_script("1; rm -rf /")


def test_batch_script_of_a_job_slurmctld_dropped_comes_from_accounting(backend):
    # scontrol exits 0 with an empty stdout on 22.05: that is "not in slurmctld", not "no script"
    assert backend.batch_script("15") == b"#!/bin/bash\necho fifteen\n"


def test_job_env_as_accounting_keeps_it(backend):
    env = backend.job_env("13")
    assert env == {
        "DUR": "100",
        "PATH": "/opt/conda/envs/x/bin:/usr/bin",
        "BASH_FUNC_module%%": '() {  eval $(modulecmd bash "$@")\n}',
        "EMPTY": "",
        "EQ": "a=b",
    }
    with pytest.raises(SlurmError, match=r"keeps no environment for job 14.*job_env"):
        backend.job_env("14")  # NONE: the flag was off when the job ran
    with pytest.raises(NotRecordedYet, match="accounting has no record of the job"):
        backend.job_env("16")  # sacct prints nothing for a job it does not know (yet): not "gone"


def test_accounting_flags_from_scontrol_show_config(backend):
    acc = backend.accounting()
    assert acc.script and acc.env and acc.lacks == []
    assert acc.flags == "job_comment,job_env,job_script"


def test_jobs_with_comment_matches_the_marker_exactly(backend):
    # 41's "of 33" is another chain; 43 kept a user's note after the marker
    assert backend.jobs_with_comment("harp retry 2 of 3", "alice", 0.0) == ["5", "40", "43"]
    with pytest.raises(SlurmError, match="invalid comment"):
        backend.jobs_with_comment("a|b", None, None)


def test_privilege_queries(backend):
    assert backend.slurm_user() == "slurm"
    assert backend.admin_level("alice") == "Operator"
