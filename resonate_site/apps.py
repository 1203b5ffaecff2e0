from django.apps import AppConfig


class ResonateSiteConfig(AppConfig):
    name = "resonate_site"
    verbose_name = "Resonate server"
