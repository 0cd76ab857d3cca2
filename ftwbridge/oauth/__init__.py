"""OAuth 2.1 for assistants, with the owner's approval at home through a signed roster."""

from . import pages
from .model import OAuthError, Pending
from .service import OAuthService

__all__ = ["OAuthError", "OAuthService", "Pending", "pages"]
