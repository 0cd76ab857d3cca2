"""`ftwbridge db import`: an embedded bridge's state (its SQLite file and its agents' key file)
carried into the PostgreSQL store, the keys sealed under `kek` (docs/operations.md, "Moving
from one process"). It sits above both `store` and `keys`, which it reads and writes."""
