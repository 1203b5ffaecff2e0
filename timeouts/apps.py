from django.apps import AppConfig


class TimeoutsConfig(AppConfig):
    name = "timeouts"
