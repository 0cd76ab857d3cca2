"""Warm Noise sessions per agent: open, hello, one call at a time, idle close, revoke."""

from .pool import CallRefused, Pool, PoolStats

__all__ = ["CallRefused", "Pool", "PoolStats"]
