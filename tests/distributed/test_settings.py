"""Timeouts read from the environment: a typo, nan, inf or a negative value is a clear error
naming the variable, never a job that silently never times out."""
import pytest

from mpigrad.distributed import settings
from mpigrad.distributed.fault import watchdog


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-1", "ten", ""])
def test_bad_values_are_refused_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv("MPIGRAD_RENDEZVOUS_TIMEOUT", text)
    with pytest.raises(ValueError, match=r"MPIGRAD_RENDEZVOUS_TIMEOUT must be a finite number "
                                         r"of seconds > 0, got"):
        settings.seconds("MPIGRAD_RENDEZVOUS_TIMEOUT", 120)
    monkeypatch.setenv(watchdog.STALL_ENV, text)
    with pytest.raises(ValueError, match="MPIGRAD_STALL_SECONDS must be a finite number of "
                                         r"seconds >= 0 \(0 turns it off\)"):
        watchdog.stall_seconds()


def test_good_values_and_defaults(monkeypatch):
    monkeypatch.delenv("MPIGRAD_RENDEZVOUS_TIMEOUT", raising=False)
    assert settings.seconds("MPIGRAD_RENDEZVOUS_TIMEOUT", 120) == 120.0
    monkeypatch.setenv("MPIGRAD_RENDEZVOUS_TIMEOUT", "2.5")
    assert settings.seconds("MPIGRAD_RENDEZVOUS_TIMEOUT", 120) == 2.5
    monkeypatch.setenv("MPIGRAD_RENDEZVOUS_TIMEOUT", "0")
    with pytest.raises(ValueError):
        settings.seconds("MPIGRAD_RENDEZVOUS_TIMEOUT", 120)
    monkeypatch.setenv(watchdog.STALL_ENV, "0")
    assert watchdog.stall_seconds() == 0.0
