"""One ledger of each job's limits (#45): the rule every hand of harpd checks (``rule``) and its record (``ledger``)."""
