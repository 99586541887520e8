"""Hypothesis's settings for every unit test: no per-example deadline and no too-slow health check.

The suite runs beside two emulated guests on two CPUs, where an example's wall time says nothing about the code: a
deadline there fails a test the code passes. Each test's own ``@settings`` still sets how many examples it runs (a
``@settings`` made after this profile is loaded inherits what it does not set)."""

from hypothesis import HealthCheck, settings

settings.register_profile("kubecpu", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kubecpu")
