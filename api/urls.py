"""The REST API under /api/: DRF viewsets over the protocol operations, its OpenAPI schema and docs."""

from django.urls import path
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.views import APIView

from api.routers import IdRouter
from api.views import PromiseViewSet, ScheduleViewSet, TaskViewSet

router = IdRouter()
router.register("promises", PromiseViewSet, basename="promise")
router.register("tasks", TaskViewSet, basename="task")
router.register("schedules", ScheduleViewSet, basename="schedule")


class ApiRoot(APIView):
    """GET /api/: what the REST API holds."""

    @extend_schema(exclude=True)  # a page of links, not an operation
    def get(self, request):
        return Response(
            {
                "promises": reverse("promise-list", request=request),
                "tasks": reverse("task-list", request=request),
                "schedules": reverse("schedule-list", request=request),
                "schema": reverse("api-schema", request=request),
                "docs": reverse("api-docs", request=request),
            }
        )


urlpatterns = [
    path("", ApiRoot.as_view(), name="api-root"),
    path("schema/", SpectacularAPIView.as_view(urlconf="api.schema"), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    *router.urls,
]
