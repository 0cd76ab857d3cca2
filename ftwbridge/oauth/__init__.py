"""OAuth 2.1 for assistants, with the owner's approval at home through a signed roster."""

from . import pages
from .service import OAuthError, OAuthService, Pending

__all__ = ["OAuthError", "OAuthService", "Pending", "pages"]
