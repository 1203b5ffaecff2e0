from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The operations console: Django admin pages over the protocol's tables, acting through its handlers."""

    name = "console"
