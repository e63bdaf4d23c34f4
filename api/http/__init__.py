"""The HTTP surface: the /v1 routes, their bodies and ids, the error shape, the middleware and its guards, metrics
and traces. ``api.server`` assembles them with the explorer and /mcp into one app."""
