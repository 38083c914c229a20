"""CliBackend tells "no such job", "no answer" and "no record yet" apart (issue #50).

Stand-in commands print what Slurm 22.05 printed on the test cluster with
slurmctld or slurmdbd SIGSTOPped (harpd.slurm.cli_errors quotes them), and a
job's lookups go through the same backend code as for real.  Registration and
adoption then wait for such a Slurm instead of refusing for good.
"""

from __future__ import annotations

import logging
import stat

import pytest

from harp_submit import registration as client_registration
from harpd.config import SlurmSettings
from harpd.daemon.adopt import Adopter
from harpd.daemon.registration import NotAnswered, Refused, Registrar
from harpd.protocol import Decision, JobRequest, Resources
from harpd.slurm.base import JobUnknown, NotRecordedYet, SlurmError, SlurmUnavailable, waiting_on_slurm
from harpd.slurm.cli_backend import CliBackend
from harpd.slurm.cli_errors import failure
from tests.helpers.fake_slurm import FakeSlurm
from tests.unit.recovery.resubmit_fakes import store  # noqa: F401 (fixture)

# job 1: slurmctld stopped; 2: unknown to slurmctld, accounting has it; 3: unknown to both; 4: sleeps (timeout)
SCONTROL = r"""#!/bin/sh
case "$*" in
  "write batch_script 1 -") echo "job script retrieval failed: Socket timed out on send/recv operation" >&2; exit 0 ;;
  "write batch_script "*) echo "job script retrieval failed: Invalid job id specified" >&2; exit 0 ;;
  "show job --oneliner 1") echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1 ;;
  "show job --oneliner 4") sleep 30 ;;
  "requeuehold 1") echo "Unexpected message received for job 1" >&2; exit 1 ;;
  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
esac
"""
# squeue --json --states=all --jobs N (23.02+ answers "Invalid job id" for a job it does not hold)
SQUEUE = r"""#!/bin/sh
case "$*" in
  *"--jobs 1") echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1 ;;
  *"--jobs 4") sleep 30 ;;
  *"--jobs 6") printf '{"meta": {}, "errors": [{"description": "Failed while looking for jobs", %s], "jobs": []}\n' \
                '"error_number": -1, "error": "Unspecified error", "source": "slurm_load_jobs"}' ;;
  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;;
esac
"""
SACCT = r"""#!/bin/sh
case "$*" in
  *" 2") printf 'Batch Script for 2\n%s\n#!/bin/bash\necho two\n\n' "$(printf '%080d' 0 | tr 0 -)" ;;
  *" 5") echo "sacct: error: slurm_persist_conn_open: No response to persist_init" >&2
         echo "sacct: error: Problem talking to the database: Resource temporarily unavailable" >&2; exit 1 ;;
  *) ;;
esac
"""


@pytest.fixture
def backend(tmp_path):
    for name, text in {"scontrol": SCONTROL, "squeue": SQUEUE, "sacct": SACCT}.items():
        p = tmp_path / name
        p.write_text(text)
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return CliBackend(SlurmSettings(bin_dir=tmp_path, command_timeout_s=2))


def test_a_stopped_slurmctld_is_no_answer_not_an_unknown_job(backend):
    with pytest.raises(SlurmUnavailable, match="Socket timed out"):
        backend.show_job("1")
    assert backend._squeue_json_ok is not False  # a stopped slurmctld does not turn squeue's JSON off
    with pytest.raises(SlurmUnavailable, match="Unexpected message"):
        backend.requeue_hold("1")
    # exit 0 and nothing on stdout, the reason on stderr: not "slurmctld has no script"
    with pytest.raises(SlurmUnavailable, match="Socket timed out"):
        backend.batch_script("1")


def test_squeue_json_of_a_stopped_slurmctld_is_no_answer(backend):
    # 22.05: exit 0, the failure only in the document's errors, its reason lost ("Unspecified error")
    with pytest.raises(SlurmUnavailable, match="Failed while looking for jobs"):
        backend.show_job("6")
    assert backend._squeue_json_ok is not False


def test_sacct_of_a_stopped_slurmdbd_is_no_answer_and_keeps_its_json(backend):
    with pytest.raises(SlurmUnavailable, match="persist_init"):
        backend.sacct_jobs(["5"], None, None, True)
    assert backend._json_ok is not False  # not switched to the text reader for good by an outage


def test_a_job_slurmctld_does_not_know_is_unknown(backend):
    with pytest.raises(JobUnknown, match="Invalid job id"):
        backend.show_job("3")
    assert backend.batch_script("2") == b"#!/bin/bash\necho two\n"  # accounting's copy


def test_accounting_without_a_record_is_not_recorded_yet(backend):
    with pytest.raises(NotRecordedYet, match="accounting has no record of the job"):
        backend.batch_script("3")  # slurmctld: unknown; accounting: nothing (yet)
    with pytest.raises(NotRecordedYet):
        backend.job_env("3")


def test_a_stopped_slurmdbd_and_a_command_timeout_are_no_answer(backend):
    with pytest.raises(SlurmUnavailable, match="persist_init"):
        backend.job_env("5")
    with pytest.raises(SlurmUnavailable, match="gave no answer within 2 s"):
        backend.show_job("4")


def test_failure_words():
    assert isinstance(failure("m", "sbatch: error: Batch job submission failed: Socket timed out"), SlurmUnavailable)
    assert isinstance(
        failure("m", "scontrol: error: Unable to contact slurm controller (connect failure)"), SlurmUnavailable
    )
    assert isinstance(failure("m", "slurm_load_jobs error: Invalid job id specified"), JobUnknown)
    refusal = failure("m", "sbatch: error: Batch job submission failed: Invalid partition name specified")
    assert type(refusal) is SlurmError and not waiting_on_slurm(refusal)
    assert waiting_on_slurm(NotRecordedYet("x")) and not waiting_on_slurm(JobUnknown("x"))


# ---------------------------------------------------------------- registration and adoption


def test_registration_while_slurmctld_does_not_answer_asks_the_client_to_try_again(store):
    slurm = FakeSlurm()
    slurm.add("30", 1000, time_s=600)
    slurm.down = True
    with pytest.raises(NotAnswered, match="try again"):
        Registrar(store, slurm).show("30")
    slurm.down = False
    with pytest.raises(Refused, match="does not know job 31") as unknown:
        Registrar(store, slurm).show("31")
    assert not isinstance(unknown.value, NotAnswered)


def test_adoption_waits_for_slurmctld_and_says_so_once(store, caplog):
    caplog.set_level(logging.INFO, logger="harpd.adopt")
    slurm = FakeSlurm()
    token = "t" * 22
    change = {"option": "time", "value": "10 min", "old": "1:00:00", "reason": "model"}
    store.add_decision(
        token,
        1000,
        "alice",
        JobRequest.model_validate({"request": {"time_s": 3600}}),
        Resources(time_s=600),
        Decision.model_validate({"changes": [change]}),
    )
    slurm.add("30", 1000, time_s=600, comment=client_registration.with_token(None, token))
    adopter = Adopter(store, slurm)
    slurm.down = True
    assert [adopter.tick() for _ in range(5)] == [0] * 5
    assert len([r for r in caplog.records if "Slurm does not answer" in r.getMessage()]) == 1
    slurm.down = False
    assert adopter.tick() == 1 and store.get_submission("30").verified
    assert len([r for r in caplog.records if "answers again" in r.getMessage()]) == 1
