"""`python -m ftwbridge` runs the command line."""

from ftwbridge.cli import main

main()
