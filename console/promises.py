"""The operations console's promises: find them, read them decoded, settle them through the settle handler.

Nothing here edits protocol state directly. Resolve, reject and cancel run promise.settle (one transaction
each, as POST / does), so listeners get their unblock and awaiters resume.
"""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from console.tools import CappedPaginator, Operable, date, decoded, encoded, perform_each, pretty
from console.workflow import already_settled, function_name, workflow_url, workflow_view
from floor.clock import now_ms
from floor.lineage import ORIGIN
from floor.protocol import TARGET, tagged
from promises.models import Callback, Listener, Promise, PromiseState


class ProjectedStateFilter(admin.SimpleListFilter):
    """The state readers see: a pending promise past its deadline shows as timed out (or resolved, a timer)."""

    title = "state (as seen now)"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return PromiseState.choices

    def queryset(self, request, queryset):
        if self.value() in PromiseState.values:
            return queryset.with_projected_state(self.value(), now_ms())
        return queryset


class HasTargetFilter(admin.SimpleListFilter):
    title = "has target"
    parameter_name = "targeted"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(tags__has_key=TARGET)
        if self.value() == "no":
            return queryset.exclude(tags__has_key=TARGET)
        return queryset


def warn_of_pending_descendants(request, root_id):
    """Settling a workflow's root by hand leaves its pending descendants to their own deadlines: say so, and where
    to cancel them (the workflow page)."""
    pending = tagged(Promise.objects.exclude(id=root_id), "tags", {ORIGIN: root_id}).with_projected_state(
        PromiseState.PENDING, now_ms()
    )
    count = pending[:1001].count()
    if count:
        messages.warning(
            request,
            format_html(
                '{} has {} pending descendant promise{} left to their own deadlines: <a href="{}">its workflow</a>'
                " can cancel them.",
                root_id,
                "1000+" if count > 1000 else count,
                "s" if count != 1 else "",
                workflow_url(root_id),
            ),
        )


class SinceFilter(admin.SimpleListFilter):
    """Promises created (or settled) within the last hour, day or week."""

    title = "created"
    parameter_name = "created"
    column = "created_at"
    SPANS = {"hour": 3_600_000, "day": 86_400_000, "week": 7 * 86_400_000}

    def lookups(self, request, model_admin):
        return [("hour", "In the last hour"), ("day", "In the last 24 hours"), ("week", "In the last 7 days")]

    def queryset(self, request, queryset):
        span = self.SPANS.get(self.value())
        if span is None:
            return queryset
        return queryset.filter(**{f"{self.column}__gte": now_ms() - span})


class SettledSinceFilter(SinceFilter):
    title = "settled"
    parameter_name = "settled"
    column = "settled_at"


class SettleForm(forms.Form):
    value = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60}),
        help_text='Optional JSON, e.g. {"approved": true}; stored base64-encoded as the SDKs expect.',
    )

    def clean_value(self):
        try:
            return encoded(self.cleaned_data["value"])
        except ValueError as error:
            raise forms.ValidationError(f"Not JSON: {error}") from error


class CallbackInline(admin.TabularInline):
    model = Callback
    fk_name = "awaited"
    fields = ("awaiter",)
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "Callbacks: promises that resume when this one settles"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ListenerInline(admin.TabularInline):
    model = Listener
    fields = ("address",)
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = "Listeners: addresses unblocked when this promise settles"

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


FUNCTION_SEARCH = "function:"  # the search box's prefix for a function name


@admin.register(Promise)
class PromiseAdmin(Operable, admin.ModelAdmin):
    list_display = ("id", "function", "state_now", "targeted", "timer", "created", "deadline", "settled", "workflow")
    list_filter = (ProjectedStateFilter, SinceFilter, SettledSinceFilter, HasTargetFilter, "timer")
    search_fields = ("id",)
    search_help_text = (
        "An id or the start of one; key=value finds promises with that tag (resonate:origin=ID: a workflow's); "
        "function:NAME those that run that function."
    )
    ordering = ("-created_at", "-id")
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counts per filter value would scan the table
    list_per_page = 50
    actions = ("resolve", "reject", "cancel")
    inlines = (CallbackInline, ListenerInline)
    fields = (
        "id",
        "workflow",
        "function",
        "state_now",
        "stored_state",
        "param_shown",
        "value_shown",
        "tags_shown",
        "task_link",
        "created",
        "deadline",
        "settled",
    )
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # read-only: settle with the actions

    def has_delete_permission(self, request, obj=None):
        return False  # retention is `manage.py prune`

    def get_urls(self):
        view = self.admin_site.admin_view(lambda request, object_id: workflow_view(self, request, object_id))
        workflow = path("<path:object_id>/workflow/", view, name="promises_promise_workflow")
        return [workflow, *super().get_urls()]

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        if term.startswith(FUNCTION_SEARCH):
            return queryset.running(term.removeprefix(FUNCTION_SEARCH).strip()), False
        key, equals, value = term.partition("=")
        if equals and key:
            return tagged(queryset, "tags", {key.strip(): value.strip()}), False
        return queryset.filter(id__startswith=term), False

    @admin.display(description="workflow")
    def workflow(self, promise):
        return format_html('<a href="{}">tree and timeline</a>', workflow_url(promise.pk))

    @admin.display(description="function")
    def function(self, promise):
        return function_name(promise.param) or "—"

    @admin.display(description="state (now)")
    def state_now(self, promise):
        return promise.projected(now_ms()).state

    @admin.display(description="stored state")
    def stored_state(self, promise):
        return promise.state

    @admin.display(boolean=True, description="target")
    def targeted(self, promise):
        return TARGET in promise.tags

    @admin.display(description="created", ordering="created_at")
    def created(self, promise):
        return date(promise.created_at)

    @admin.display(description="timeout at", ordering="timeout_at")
    def deadline(self, promise):
        return date(promise.timeout_at)

    @admin.display(description="settled")
    def settled(self, promise):
        return date(promise.projected(now_ms()).settled_at)

    @admin.display(description="param")
    def param_shown(self, promise):
        return decoded(promise.param)

    @admin.display(description="value")
    def value_shown(self, promise):
        return decoded(promise.projected(now_ms()).value)

    @admin.display(description="tags")
    def tags_shown(self, promise):
        return pretty(promise.tags)

    @admin.display(description="task")
    def task_link(self, promise):
        try:
            task = promise.task
        except Promise.task.RelatedObjectDoesNotExist:
            return "—"
        return format_html(
            '<a href="{}">{} (version {})</a>',
            reverse("admin:tasks_task_change", args=[quote(promise.pk)]),
            task.projected(promise, now_ms()).state,
            task.version,
        )

    @admin.action(description="Resolve selected promises…", permissions=["operate"])
    def resolve(self, request, queryset):
        return self.settle(request, queryset, PromiseState.RESOLVED, "resolved")

    @admin.action(description="Reject selected promises…", permissions=["operate"])
    def reject(self, request, queryset):
        return self.settle(request, queryset, PromiseState.REJECTED, "rejected")

    @admin.action(description="Cancel selected promises…", permissions=["operate"])
    def cancel(self, request, queryset):
        return self.settle(request, queryset, PromiseState.REJECTED_CANCELED, "canceled")

    def settle(self, request, queryset, state, done):
        """First an intermediate page asks for the optional value; confirming it runs promise.settle per id."""
        ids = list(queryset.values_list("id", flat=True)[:1000])
        form = SettleForm(request.POST if "confirm" in request.POST else None)
        if form.is_bound and form.is_valid():
            value = form.cleaned_data["value"]
            requests = [{"id": id, "state": state, "value": value} for id in ids]
            perform_each(request, Promise, "promise.settle", requests, done, unchanged=already_settled)
            for id in ids:
                warn_of_pending_descendants(request, id)
            return None  # back to the list
        context = {
            **self.admin_site.each_context(request),
            "title": f"{done.capitalize()}: {len(ids)} promise{'s' if len(ids) != 1 else ''}",
            "ids": ids,
            "form": form,
            "action": request.POST.get("action"),
            "opts": self.model._meta,
            "listed": format_html_join("", "<li><code>{}</code></li>", ((id,) for id in ids)),
        }
        return TemplateResponse(request, "admin/promises/settle.html", context)
