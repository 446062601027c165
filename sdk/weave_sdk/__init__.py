"""Python client of the Weave API (history reads, recovery, start, signals, the worker protocol); needs only httpx."""

from weave_sdk.client import WeaveClient
from weave_sdk.errors import (
    Conflict,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    WeaveError,
    WeaveNetworkError,
    WeaveResponseError,
)
from weave_sdk.exactjson import RawJSON

__all__ = [
    "Conflict",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "RawJSON",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "WeaveClient",
    "WeaveError",
    "WeaveNetworkError",
    "WeaveResponseError",
]
