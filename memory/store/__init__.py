"""Everything that knows Chroma: the codec (names, ids, record <-> model), the log store (registry,
groups, sessions, messages, journals, leases), the vector store (partitions and group indexes), the
admin operations (drops, rebuilds, erasure), the connection and the folder lock. The rest of epimem
sees ``protocols`` and ``records``; ``factory.open_store`` builds the parts."""
