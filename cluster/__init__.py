"""`make cluster`: ftwbridge as a cluster on one machine (docs/operations.md, "Many instances").

A throwaway PostgreSQL, `ftwbridge db migrate`, two keys services, three `ftwbridge serve`
instances, HAProxy in front of `/mcp`, the OAuth endpoints and `/v1/box`, and stub homes whose
boxes dial through HAProxy; then the demo's scripted assistant session through HAProxy.
`python -m cluster --once` stops after the session (the tests); without it the cluster serves
until Ctrl-C. `cluster.rig.open_cluster` is the same cluster for tests that break parts of it.
"""
