"""The REST API under /api/: DRF viewsets over the protocol handlers, its OpenAPI schema and docs."""

urlpatterns = []
