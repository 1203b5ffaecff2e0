"""floor.conf's RESONATE settings: each read once is kept, until the settings change."""

from floor import conf
from floor.conf import resonate_settings


def test_a_setting_is_read_afresh_once_the_settings_change(settings):
    settings.RESONATE = {**settings.RESONATE, "RETRY_TIMEOUT_MS": 1234}
    assert resonate_settings.RETRY_TIMEOUT_MS == 1234
    assert resonate_settings.__dict__["RETRY_TIMEOUT_MS"] == 1234  # kept

    settings.RESONATE = {**settings.RESONATE, "RETRY_TIMEOUT_MS": 4321}

    assert resonate_settings.RETRY_TIMEOUT_MS == 4321


def test_a_value_read_before_a_change_is_not_kept(settings, monkeypatch):
    """Another thread reads a setting while the settings change: what it read from the old settings is not kept."""
    settings.RESONATE = {**settings.RESONATE, "RETRY_TIMEOUT_MS": 1234}

    class ChangingAsItIsRead:
        @property
        def RESONATE(self):
            old = settings.RESONATE
            resonate_settings.forget()  # the change lands (setting_changed) just after this read
            return old

    monkeypatch.setattr(conf, "settings", ChangingAsItIsRead())
    assert resonate_settings.RETRY_TIMEOUT_MS == 1234  # answered from the settings it read

    assert "RETRY_TIMEOUT_MS" not in resonate_settings.__dict__
