"""Every API error answers in the one envelope, its code and status from ``core.errors``."""

import logging

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf
from rest_framework.response import Response

from core import errors
from core.request_id import request_id_of

logger = logging.getLogger("weave.api")

_DRF_MAP = {
    drf.NotAuthenticated: errors.Unauthenticated,
    drf.AuthenticationFailed: errors.Unauthenticated,
    drf.PermissionDenied: errors.PermissionDenied,
    drf.ParseError: errors.InvalidArgument,
    drf.ValidationError: errors.InvalidArgument,
    drf.NotFound: errors.NotFound,
    drf.Throttled: errors.ResourceExhausted,
}


class MethodNotAllowed(errors.WeaveError):
    code, status = "METHOD_NOT_ALLOWED", 405


class NotAcceptable(errors.WeaveError):
    code, status = "NOT_ACCEPTABLE", 406


class LengthRequired(errors.InvalidArgument):
    """A body without Content-Length that the server cannot read to its end: INVALID_ARGUMENT naming it, 411."""

    status = 411


def as_weave_error(exc: Exception) -> errors.WeaveError:
    if isinstance(exc, errors.WeaveError):
        return exc
    if isinstance(exc, Http404):
        return errors.NotFound("not found")
    if isinstance(exc, drf.MethodNotAllowed):
        return MethodNotAllowed(str(exc.detail))
    if isinstance(exc, drf.UnsupportedMediaType):
        return errors.InvalidArgument(str(exc.detail), field="Content-Type")
    if isinstance(exc, drf.NotAcceptable):
        return NotAcceptable(str(exc.detail))
    for drf_class, weave_class in _DRF_MAP.items():
        if isinstance(exc, drf_class):
            return weave_class(str(exc.detail) if not isinstance(exc.detail, (list, dict)) else "invalid request")
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.exception("database unavailable")
        return errors.Unavailable("the database is unavailable; try again")
    if isinstance(exc, DatabaseError):
        logger.exception("database error")
        return errors.Unavailable("the database refused the request; try again")
    logger.exception("unhandled error")
    return errors.WeaveError("internal error")


def envelope_exception_handler(exc, context):
    error = as_weave_error(exc)
    response = Response({"error": error.as_dict()}, status=error.status)
    if isinstance(error, errors.Unauthenticated):
        response["WWW-Authenticate"] = 'Bearer realm="weave"'
    return response


def json_error(request, error: errors.WeaveError) -> JsonResponse:
    """The envelope answered outside a DRF view (its exception handler answers inside one)."""
    return JsonResponse({"request_id": request_id_of(request), "error": error.as_dict()}, status=error.status)


def api_not_found(request, exception=None):
    """404 for unrouted paths: the envelope under /v1/, Django's page elsewhere."""
    if request.path.startswith("/v1/"):
        return json_error(request, errors.NotFound("no such endpoint"))
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def api_server_error(request):
    if request.path.startswith("/v1/"):
        return json_error(request, errors.WeaveError("internal error"))
    from django.views.defaults import server_error

    return server_error(request)
