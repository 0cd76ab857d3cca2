"""The mesh between a cluster's instances (docs/operations.md, "Many instances"): `/mcp` calls forwarded whole to
the instance that holds the token's home, signed with the shared `mesh_key`.

`signing` is the sans-I/O part (what is signed, how a request is checked); `listener` is the
internal listener's app; `forward` the sending side, over `channel` (HTTP/1.1 on connections
kept between instances); the holder of each home is known in memory (`store/known.py`).
"""
