"""Python client of every operation of the Weave API (``WeaveClient.operations()``); needs only httpx."""

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
from weave_sdk.retry import Retry

__all__ = [
    "Conflict",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "RawJSON",
    "ResourceExhausted",
    "Retry",
    "Unauthenticated",
    "Unavailable",
    "WeaveClient",
    "WeaveError",
    "WeaveNetworkError",
    "WeaveResponseError",
]
