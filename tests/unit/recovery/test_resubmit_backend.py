"""The Slurm calls recovery adds to CliBackend, over stand-in commands.

Each stand-in prints what Slurm 22.05 printed on the local cluster (the
output shapes are copied from real runs), so the parsing is tested without a
cluster; tests/slurm/test_recovery.py runs the same calls for real.
"""

from __future__ import annotations

import stat

import pytest

from harpd.config import SlurmSettings
from harpd.slurm.base import SlurmError
from harpd.slurm.cli_backend import CliBackend

SCONTROL = r"""#!/bin/sh
case "$1 $2" in
  "write batch_script")
    if [ "$3" = 12 ]; then printf '#!/bin/bash\n#SBATCH --job-name=x\necho "$@"\n'; exit 0; fi
    echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
  "show config") printf 'Configuration data as of 2026-11-22T03:39:59\nSlurmUser               = slurm(64030)\nSlurmdUser              = root(0)\n' ;;
esac
"""
SACCT = r"""#!/bin/sh
case "$*" in
  *--batch-script*)
    case "$*" in
      *" 13"*) printf 'Batch Script for 13\n--------------------------------------------------------------------------------\n#!/bin/bash\nsleep 1\n\n' ;;
      *) printf 'Batch Script for 14\n--------------------------------------------------------------------------------\nNONE\n\n' ;;
    esac ;;
  *JobID,Comment*) printf '40|harp retry 2 of 3\n41|harp retry 2 of 33\n42|\n43|harp retry 2 of 3; user note\n' ;;
esac
"""
SQUEUE = r"""#!/bin/sh
printf '5|harp retry 2 of 3\n6|(null)\n40|harp retry 2 of 3\n'
"""
SACCTMGR = r"""#!/bin/sh
printf 'Operator|\n'
"""


@pytest.fixture
def backend(tmp_path):
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


def test_jobs_with_comment_matches_the_marker_exactly(backend):
    # 41's "of 33" is another chain; 43 kept a user's note after the marker
    assert backend.jobs_with_comment("harp retry 2 of 3", "alice", 0.0) == ["5", "40", "43"]
    with pytest.raises(SlurmError, match="invalid comment"):
        backend.jobs_with_comment("a|b", None, None)


def test_privilege_queries(backend):
    assert backend.slurm_user() == "slurm"
    assert backend.admin_level("alice") == "Operator"
