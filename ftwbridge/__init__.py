"""ftwbridge: the cloud part between MCP assistants and FTW home energy boxes."""

__version__ = "0.1.0"
