"""Sans-I/O protocol core: bytes and values in, bytes and events out.

Nothing here imports trio, sockets or files beyond the packaged contract, and nothing reads the
clock or the environment: callers pass `now` in.
"""
