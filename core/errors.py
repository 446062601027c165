"""Errors every layer raises; the API maps each to its HTTP status and error envelope."""


class WeaveError(Exception):
    code = "INTERNAL"
    status = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def as_dict(self) -> dict:
        body = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class InvalidArgument(WeaveError):
    code, status = "INVALID_ARGUMENT", 400


class FailedPrecondition(WeaveError):
    code, status = "FAILED_PRECONDITION", 400


class Unauthenticated(WeaveError):
    code, status = "UNAUTHENTICATED", 401


class PermissionDenied(WeaveError):
    code, status = "PERMISSION_DENIED", 403


class NotFound(WeaveError):
    code, status = "NOT_FOUND", 404


class Aborted(WeaveError):
    code, status = "ABORTED", 409


class AlreadyExists(WeaveError):
    code, status = "ALREADY_EXISTS", 409


class ResourceExhausted(WeaveError):
    code, status = "RESOURCE_EXHAUSTED", 429


class Unavailable(WeaveError):
    code, status = "UNAVAILABLE", 503


class PayloadTooLarge(InvalidArgument):
    """A body or stored value over its size limit: INVALID_ARGUMENT naming the field, answered 413."""

    status = 413
