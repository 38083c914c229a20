"""Soft time limits: harpd watches the jobs it sized while they wait and run.

* ``privilege``: may harpd change other users' jobs (root, SlurmUser, a Slurm
  operator)?  Decided once at start, logged, shown by ``harp status``.
* ``extend``: a running job harp shortened keeps the user's own request as
  its kill time; before harp's limit runs out, harpd raises it.
* ``resize``: a pending job harp sized is re-decided as its siblings finish.
* ``service``: one Slurm listing per interval feeds both.

Every change is a row of the store's ``limit_changes`` table, committed
before Slurm is asked, so it happens at most once per crossing across a
SIGKILL of harpd.
"""
