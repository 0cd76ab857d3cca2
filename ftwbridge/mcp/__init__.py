"""`/mcp`: Streamable HTTP, stateless, JSON responses; 2026-07-28 per request and 2025 eras."""
