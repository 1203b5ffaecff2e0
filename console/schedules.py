"""The operations console's schedules: created and deleted through schedule.create and schedule.delete."""

import json

from django import forms
from django.contrib import admin

from console.audit import recorded
from console.tools import CappedPaginator, date, decoded, perform_each, pretty
from floor.clock import now_ms
from resonate_site.protocol.envelope import answered
from schedules.cron import NEVER, cron_error, next_cron
from schedules.models import Schedule

NEXT_RUNS = 5


def json_object(text, what):
    try:
        value = json.loads(text or "{}")
    except ValueError as error:
        raise forms.ValidationError(f"{what} is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise forms.ValidationError(f"{what} must be a JSON object")
    return value


class ScheduleForm(forms.ModelForm):
    """Create a schedule; the protocol's schedule.create decides what is valid and writes it."""

    promise_param = forms.CharField(
        required=False,
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text='The fired promises\' param, as the protocol stores it, e.g. {"data": "<base64 of JSON>"}.',
    )
    promise_tags = forms.CharField(
        required=False,
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text='Tags of the fired promises, e.g. {"resonate:target": "poll://any@default"}.',
    )

    class Meta:
        model = Schedule
        fields = ("id", "cron", "promise_id", "promise_timeout")
        help_texts = {"cron": "Standard cron in UTC: 5 fields, or 6 with leading seconds."}

    def clean_cron(self):
        cron = self.cleaned_data["cron"]
        problem = cron_error(cron)
        if problem:
            raise forms.ValidationError(f"Invalid cron: {problem}")
        return cron

    def clean_promise_param(self):
        return json_object(self.cleaned_data["promise_param"], "The param")

    def clean_promise_tags(self):
        return json_object(self.cleaned_data["promise_tags"], "The tags")

    def request(self):
        data = self.cleaned_data
        return {
            "id": data["id"],
            "cron": data["cron"],
            "promiseId": data["promise_id"],
            "promiseTimeout": data["promise_timeout"],
            "promiseParam": data["promise_param"],
            "promiseTags": data["promise_tags"],
        }

    def clean(self):
        cleaned = super().clean()
        if not self.errors:
            if Schedule.objects.filter(pk=cleaned.get("id")).exists():
                raise forms.ValidationError("A schedule with this id exists; delete it first to replace it.")
            status, answer = answered("schedule.create", self.request())
            if status != 200:
                raise forms.ValidationError(f"schedule.create answered {status}: {answer}")
        return cleaned

    def validate_unique(self):
        pass  # schedule.create is idempotent on the id; it decides


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ("id", "cron", "promise_id", "next_run", "last_run")
    search_fields = ("id",)
    search_help_text = "A schedule id or the start of one."
    ordering = ("id",)
    paginator = CappedPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # counts per filter value would scan the table
    readonly_fields = ("next_runs", "param_shown", "tags_shown", "created", "last_run")

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("id", "cron", "promise_id", "promise_timeout", "promise_param", "promise_tags")
        return ("id", "cron", "promise_id", "promise_timeout", "param_shown", "tags_shown", "created", "last_run")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return self.get_fields(request, obj) + ("next_runs",)

    def get_fieldsets(self, request, obj=None):
        fields = self.get_fields(request, obj)
        return [(None, {"fields": fields + (("next_runs",) if obj is not None else ())})]

    def has_change_permission(self, request, obj=None):
        # a schedule is created or deleted, never edited: the add page alone needs it
        return obj is None and super().has_change_permission(request)

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        return (queryset.filter(id__startswith=term) if term else queryset), False

    def save_model(self, request, obj, form, change):
        # the form's clean() ran schedule.create, in its own transaction; Django's add view logs "Added" too
        recorded(request, Schedule, obj.pk, "schedule.create", form.request(), "200 created")

    def delete_model(self, request, obj):
        perform_each(request, Schedule, "schedule.delete", [{"id": obj.pk}], "deleted")

    def delete_queryset(self, request, queryset):
        ids = queryset.values_list("id", flat=True)
        perform_each(request, Schedule, "schedule.delete", [{"id": id} for id in ids], "deleted")

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, schedule):
        return date(schedule.next_run_at)

    @admin.display(description="last run")
    def last_run(self, schedule):
        return date(schedule.last_run_at)

    @admin.display(description="created")
    def created(self, schedule):
        return date(schedule.created_at)

    @admin.display(description="param")
    def param_shown(self, schedule):
        return decoded(schedule.promise_param)

    @admin.display(description="promise tags")
    def tags_shown(self, schedule):
        return pretty(schedule.promise_tags)

    @admin.display(description=f"next {NEXT_RUNS} runs (UTC)")
    def next_runs(self, schedule):
        runs, at = [], max(schedule.next_run_at - 1, now_ms())
        while len(runs) < NEXT_RUNS and (at := next_cron(schedule.cron, at)) != NEVER:
            runs.append(date(at))
        return pretty(runs)
