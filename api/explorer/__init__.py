"""The browser explorer at ``/ui``: its static files (``ui/``) and the read-only routes it needs."""
