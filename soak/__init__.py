"""`make soak`: the bridge on loopback under load and injected faults, checked afterwards for
anything it left behind. `python -m soak.run --help` for the knobs; `soak/run.py`
says what runs and in which order."""
