"""The surfaces: the in-process facade, the HTTP app, the HTTP client and the command line."""
