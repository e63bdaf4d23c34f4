"""The write path: messages stored durably, then formed into episodes (the ingestor), off the request
path (the formation worker), exclusively per session (coordination: thread locks or leases in
Chroma); and readers of conversation files (LoCoMo, REALTALK, JSON Lines)."""
