"""The operations console's tasks: state, version, lease holder and expiry; halt and continue run the handlers."""

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import format_html

from console.tools import CappedPaginator, Operable, date, perform_each
from console.workflow import workflow_url
from floor.clock import now_ms
from tasks.models import Task, TaskState, TimeoutKind


class ProjectedStateFilter(admin.SimpleListFilter):
    """The state readers see: the task of a settled or expired promise shows as fulfilled."""

    title = "state (as seen now)"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return TaskState.choices

    def queryset(self, request, queryset):
        if self.value() in TaskState.values:
            return queryset.with_projected_state(self.value(), now_ms())
        return queryset


@admin.register(Task)
class TaskAdmin(Operable, admin.ModelAdmin):
    list_display = ("id", "state_now", "version", "pid", "lease_expires", "retry_at", "resumes_count")
    list_filter = (ProjectedStateFilter,)
    list_select_related = ("promise",)
    search_fields = ("promise__id",)
    search_help_text = "A task id (its promise's id) or the start of one."
    ordering = ("-promise__created_at", "-promise_id")
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counts per filter value would scan the table
    list_per_page = 50
    actions = ("halt", "resume")
    fields = ("promise_link", "workflow", "state_now", "stored_state", "version", "pid", "ttl", "lease_expires")
    fields += ("retry_at", "resumes_count")
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # read-only: halt and continue with the actions

    def has_delete_permission(self, request, obj=None):
        return False

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        return (queryset.filter(promise__id__startswith=term) if term else queryset), False

    def shown(self, task):
        return task.projected(task.promise, now_ms())

    @admin.display(description="state (now)")
    def state_now(self, task):
        return self.shown(task).state

    @admin.display(description="stored state")
    def stored_state(self, task):
        return task.state

    @admin.display(description="lease holder (pid)")
    def pid(self, task):
        return self.shown(task).pid or "—"

    @admin.display(description="lease expires")
    def lease_expires(self, task):
        return date(task.timeout_at) if task.timeout_kind == TimeoutKind.LEASE else "—"

    @admin.display(description="execute re-sent at")
    def retry_at(self, task):
        return date(task.timeout_at) if task.timeout_kind == TimeoutKind.RETRY else "—"

    @admin.display(description="resumes")
    def resumes_count(self, task):
        return len(self.shown(task).resumes)

    @admin.display(description="workflow")
    def workflow(self, task):
        return format_html('<a href="{}">tree and timeline</a>', workflow_url(task.pk))

    @admin.display(description="promise")
    def promise_link(self, task):
        url = reverse("admin:promises_promise_change", args=[quote(task.pk)])
        return format_html('<a href="{}">{}</a>', url, task.pk)

    @admin.action(description="Halt selected tasks", permissions=["operate"])
    def halt(self, request, queryset):
        perform_each(request, Task, "task.halt", [{"id": id} for id in queryset.values_list("pk", flat=True)], "halted")

    @admin.action(description="Continue selected halted tasks", permissions=["operate"])
    def resume(self, request, queryset):
        ids = queryset.values_list("pk", flat=True)
        perform_each(request, Task, "task.continue", [{"id": id} for id in ids], "continued")
