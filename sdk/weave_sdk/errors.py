"""Errors of the Weave API and of this client."""


class WeaveError(Exception):
    """An error answer, or a refusal by the client before sending (``status`` None)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        request_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" + (f" (field {field})" if field else ""))
        self.code = code
        self.message = message
        self.field = field
        self.request_id = request_id
        self.status = status


class InvalidArgument(WeaveError):
    pass


class FailedPrecondition(WeaveError):
    pass


class Unauthenticated(WeaveError):
    pass


class PermissionDenied(WeaveError):
    pass


class NotFound(WeaveError):
    pass


class Conflict(WeaveError):
    """ABORTED (a stale revision) or ALREADY_EXISTS (a reused idempotency key)."""


class ResourceExhausted(WeaveError):
    pass


class Unavailable(WeaveError):
    pass


class WeaveNetworkError(WeaveError):
    """The server could not be reached, even after re-sending the same request."""


class WeaveResponseError(WeaveError):
    """The server answered something this client cannot trust (wrong parent ids, bad shape)."""


ERROR_CLASSES = {
    "INVALID_ARGUMENT": InvalidArgument,
    "FAILED_PRECONDITION": FailedPrecondition,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "NOT_FOUND": NotFound,
    "ABORTED": Conflict,
    "ALREADY_EXISTS": Conflict,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "UNAVAILABLE": Unavailable,
}
