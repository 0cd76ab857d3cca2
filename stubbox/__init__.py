"""stubbox: a stand-in FTW home box for developers and tests."""
