"""Recovery: what happens after a job ran out (escalation rule, resubmission chain)."""
