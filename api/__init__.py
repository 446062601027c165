"""The HTTP layer: all DRF code — bearer authentication, the envelope and errors, exact-JSON parsing and
rendering, the views of history reads, engine commands, the worker protocol and recovery, and the OpenAPI
description."""
