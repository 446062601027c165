"""The operator's recovery operations: their commands, the check pipeline shared by preview and commit,
eligibility and receipts. State changes go through ``engine`` transitions; audit rows through
``history.audits`` and receipts through ``history.idempotency``."""
