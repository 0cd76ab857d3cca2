"""The examples and the settings table that `ftwbridge --help` and `ftwbridge config --help`
end with (each command's own `--help` says its options)."""

from __future__ import annotations

EXAMPLES = """\
examples:
  ftwbridge config check --config bridge.toml      is it valid? what is in effect?
  ftwbridge serve --config bridge.toml              run the bridge
  ftwbridge home enroll --home h1 --key 3b6a...     enroll a home's public key (64 hex digits)
  ftwbridge home list                               the homes and their rosters
  ftwbridge agent create --home h1                  a new agent key (the owner then approves it)
  ftwbridge agent list --home h1                    the agents h1's owner approved
  ftwbridge token issue --home h1 --agent agent-1a2b --wait 300
  ftwbridge db backup --to /backups/bridge-$(date +%F)
  FTWBRIDGE_STATE_DIR=/var/lib/ftwbridge ftwbridge home list

Every setting is a key of the TOML file and an environment variable FTWBRIDGE_<NAME>, the
variable winning; `ftwbridge config --help` lists them all with their defaults, and
docs/operations.md says more. `ftwbridge CMD --help` shows a command's options.
"""


def config_epilog() -> str:
    """The settings, each with its variable and default (loaded when asked for)."""
    from ftwbridge.settings import settings_help

    return "settings (TOML key, environment variable, default):\n" + settings_help()
