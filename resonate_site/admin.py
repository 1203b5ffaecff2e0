"""The operations console's frame (the pages themselves are in each app's admin.py)."""

from django.contrib import admin

admin.site.site_header = "Resonate operations"
admin.site.site_title = "Resonate operations"
admin.site.index_title = "Promises, tasks, schedules and the outbox"
