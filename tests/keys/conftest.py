"""The store tests' fixtures (tests/store/conftest.py), for the keys service's tests on SQLite
and on a throwaway PostgreSQL."""

from tests.store.conftest import open_same, pg_url, store

__all__ = ["open_same", "pg_url", "store"]
