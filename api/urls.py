"""The REST API under /api/: DRF viewsets over the protocol operations, its OpenAPI schema and docs."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from api.routers import IdRouter
from api.views import PromiseViewSet, ScheduleViewSet, TaskViewSet

router = IdRouter()
router.register("promises", PromiseViewSet, basename="promise")
router.register("tasks", TaskViewSet, basename="task")
router.register("schedules", ScheduleViewSet, basename="schedule")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(urlconf="api.schema"), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    *router.urls,
]
