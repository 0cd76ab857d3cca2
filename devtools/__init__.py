"""Developer tools beside the product: the rig that starts a bridge's stub homes, grants
agents and plays the person and the assistant, used by `ftwbridge demo`, the tests,
`cluster/`, `soak/` and `bench/`. Nothing in `ftwbridge/` imports this package except the
demo command, and only when it runs (docs/architecture.md, "What runs where")."""
