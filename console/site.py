"""The console's admin site: django.contrib.admin's, with the protocol's sections first and no "View site"."""

from django.contrib import admin
from django.contrib.admin import apps

# The console's sections first, in the order an operator looks; accounts and Beat's tables after them.
FIRST = ("promises", "tasks", "schedules", "outbox")


class ConsoleSite(admin.AdminSite):
    site_header = site_title = "Resonate operations"
    index_title = "Promises, tasks, schedules and the outbox"
    site_url = None  # no "View site": the server has no site beside the console, / is the protocol (POST only)

    def get_app_list(self, request, app_label=None):
        listed = super().get_app_list(request, app_label)
        rank = {label: n for n, label in enumerate(FIRST)}
        return sorted(listed, key=lambda app: (rank.get(app["app_label"], len(FIRST)), app["name"]))


class ConsoleAdminConfig(apps.AdminConfig):
    """django.contrib.admin with the console's own site as admin.site."""

    default_site = "console.site.ConsoleSite"
