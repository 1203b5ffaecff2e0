from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "tasks"

    def ready(self):
        from outbox.delivery import drops_stale
        from outbox.models import MessageKind
        from tasks.engine import stale_executes

        drops_stale(MessageKind.EXECUTE, stale_executes)  # a retried execute whose task moved on is dropped
