"""The stored history (Django app label ``history``): every table and migration, tenancy, credentials and
groups, the fixed lock order, idempotency receipts, the audit writers, ownership checks and every read
(``history.selectors``, for the API and the admin alike)."""
