"""epimem's read path: search, timelines and context for prompts."""
