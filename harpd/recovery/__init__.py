"""Recovery: what happens after a job ran out of time or memory.

* ``escalation``: THE escalation rule (double what ran out, capped); ``harp replay`` uses it too;
* ``policy``: who is recovered, the first attempt's limits and the next one's, caps;
* ``machine``: the exactly-once state machine over the store's ``attempts`` table (``make``);
* ``attempts``: an attempt and its limits, typed, and their JSON row in the store;
* ``mode``: requeue in place or resubmit, by what harpd may do in Slurm;
* ``requeue`` / ``resubmit``: carrying out an attempt one way or the other;
* ``sbatch_argv`` / ``environment``: a resubmission's sbatch arguments and environment;
* ``crash``: the test hooks that kill harpd between two steps.
"""
