"""The read model: each group's records as the read path reads them, kept per version of the group."""
