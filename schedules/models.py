"""Schedules: cron expressions that create a promise at every occurrence."""

from django.db import models

from floor.protocol import IdField


class ScheduleQuerySet(models.QuerySet):
    def locked(self, schedule_id):
        return self.select_for_update().filter(pk=schedule_id).first()


class Schedule(models.Model):
    id = IdField(primary_key=True)
    cron = models.TextField()
    promise_id = models.TextField(help_text="Template of the promise id: {{.id}} and {{.timestamp}} expand.")
    promise_timeout = models.BigIntegerField(help_text="Milliseconds from an occurrence to its promise's deadline.")
    promise_param = models.JSONField(default=dict)
    promise_tags = models.JSONField(default=dict)
    created_at = models.BigIntegerField()
    # The spec keeps a separate scheduleTimeouts entry, always equal to nextRunAt: this column is both.
    next_run_at = models.BigIntegerField(db_index=True)
    last_run_at = models.BigIntegerField(null=True, blank=True)

    objects = ScheduleQuerySet.as_manager()

    def __str__(self):
        return self.id

    def to_record(self):
        record = {
            "id": self.id,
            "cron": self.cron,
            "promiseId": self.promise_id,
            "promiseTimeout": self.promise_timeout,
            "promiseParam": self.promise_param,
            "promiseTags": self.promise_tags,
            "createdAt": self.created_at,
            "nextRunAt": self.next_run_at,
        }
        if self.last_run_at is not None:
            record["lastRunAt"] = self.last_run_at
        return record
