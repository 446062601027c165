"""The operations console: the Django admin app with every table read-only, the instance page and its step
graph, and the recovery, control and signal forms, which run the same recovery operations and engine services
as the API."""
