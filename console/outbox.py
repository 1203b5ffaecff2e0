"""The operations console's outbox: what is undelivered or failed, how often it was tried, and why."""

from django.contrib import admin
from django.utils.html import format_html

from console.audit import recorded
from console.tools import CappedPaginator, Operable, date, pretty
from console.workflow import workflow_url
from floor.clock import now_ms
from outbox.dispatch import announce
from outbox.models import DeliveryState, Message


class DeliveryFilter(admin.SimpleListFilter):
    """Undelivered (pending or failed) messages unless asked otherwise: they are what an operator looks for."""

    title = "delivery"
    parameter_name = "delivery"

    def lookups(self, request, model_admin):
        return [("undelivered", "Undelivered (pending or failed)"), *DeliveryState.choices, ("all", "All")]

    def choices(self, changelist):
        for lookup, title in self.lookup_choices:
            yield {
                "selected": (self.value() or "undelivered") == lookup,
                "query_string": changelist.get_query_string({self.parameter_name: lookup}),
                "display": title,
            }

    def queryset(self, request, queryset):
        value = self.value() or "undelivered"
        if value == "undelivered":
            return queryset.filter(state__in=[DeliveryState.PENDING, DeliveryState.FAILED])
        if value in DeliveryState.values:
            return queryset.filter(state=value)
        return queryset


@admin.register(Message)
class MessageAdmin(Operable, admin.ModelAdmin):
    list_display = ("kind", "subject", "address", "state", "attempts", "last_error", "created", "next_attempt")
    list_filter = (DeliveryFilter, "kind")
    ordering = ("-id",)
    search_fields = ("subject",)
    search_help_text = "A task or promise id, or the start of one."
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counts per filter value would scan the table
    actions = ("redeliver",)
    fields = ("kind", "subject", "workflow", "address", "state", "attempts", "last_error", "created", "next_attempt")
    fields += ("delivered", "body")
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        return (queryset.filter(subject__startswith=term) if term else queryset), False

    @admin.display(description="workflow")
    def workflow(self, message):
        return format_html('<a href="{}">tree and timeline</a>', workflow_url(message.subject))

    @admin.display(description="created", ordering="created_at")
    def created(self, message):
        return date(message.created_at)

    @admin.display(description="next attempt")
    def next_attempt(self, message):
        return date(message.next_attempt_at) if message.state == DeliveryState.PENDING else "—"

    @admin.display(description="delivered")
    def delivered(self, message):
        return date(message.delivered_at)

    @admin.display(description="message as sent")
    def body(self, message):
        return pretty(message.body())

    @admin.action(description="Redeliver selected undelivered messages now", permissions=["operate"])
    def redeliver(self, request, queryset):
        """Undelivered (pending, failed or dropped) messages go back to pending with fresh attempts, at once."""
        asked = dict(queryset.values_list("key", "pk"))
        keys = Message.objects.redeliver(list(asked), now_ms())
        announce(*keys)
        queued = set(keys)
        for key, pk in asked.items():
            outcome = "queued for delivery" if key in queued else "not changed: already delivered"
            recorded(request, Message, pk, "outbox.redeliver", {"key": key}, outcome)
        self.message_user(request, f"{len(keys)} message{'s' if len(keys) != 1 else ''} queued for delivery.")
