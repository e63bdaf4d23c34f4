"""Keeping embedded Chroma in bounds: the process's allocator settings, one process per data folder, an
index on the engine's write log, and erasure of what deletes leave on disk. Beside the store (whose
connection runs the engine) and below it: nothing here reads or writes epimem's records."""
