"""What happens to memory after it is written: deletion with repair, summaries, export and import,
re-embedding after a model change."""
